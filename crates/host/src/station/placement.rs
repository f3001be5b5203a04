//! Which station runs which layers. Layers are grouped into a fixed number of virtual shards
//! ([`VIRTUAL_SHARDS`]) and the virtual shards are dealt to stations in contiguous, near-equal
//! runs: with 21, one station owns all 21, two split them 11/10, three 7/7/7, four 6/5/5/5.
//! A station's layers stay one contiguous range (one hop per station per step), and the
//! layer-to-shard map never depends on the station count, so a change of station count moves
//! whole virtual shards, never re-cuts them: what moves is known from the two deals alone
//! ([`moved_layers`]).

use std::ops::Range;

/// Virtual shards a model's layers are grouped into. 21 = 3·7 splits evenly for 1, 3 and 7
/// stations and within one shard for any count up to 21.
pub const VIRTUAL_SHARDS: usize = 21;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("{stations} stations: at least 1 and at most {max} (one per virtual shard)")]
    Stations { stations: usize, max: usize },
    #[error("{stations} stations for {layers} layers: station {station} would run no layer")]
    Idle {
        stations: usize,
        layers: usize,
        station: usize,
    },
}

/// The layers of virtual shard `v`: layer l belongs to shard ⌊l·V/L⌋, so shards take
/// near-equal contiguous runs of layers (empty ones when there are fewer layers than shards).
pub fn shard_layers(n_layers: usize, v: usize) -> Range<usize> {
    let first = |v: usize| (v * n_layers).div_ceil(VIRTUAL_SHARDS);
    first(v).min(n_layers)..first(v + 1).min(n_layers)
}

/// The virtual shards of station `s` of `stations`: contiguous, the first ones one longer.
pub fn station_shards(stations: usize, s: usize) -> Range<usize> {
    let (base, extra) = (VIRTUAL_SHARDS / stations, VIRTUAL_SHARDS % stations);
    let start = s * base + s.min(extra);
    start..start + base + usize::from(s < extra)
}

/// Every station's layer range for a model of `n_layers` on `stations` stations.
pub fn layer_ranges(n_layers: usize, stations: usize) -> Result<Vec<Range<usize>>, PlacementError> {
    if stations == 0 || stations > VIRTUAL_SHARDS {
        return Err(PlacementError::Stations {
            stations,
            max: VIRTUAL_SHARDS,
        });
    }
    (0..stations)
        .map(|s| {
            let shards = station_shards(stations, s);
            let r = shard_layers(n_layers, shards.start).start
                ..shard_layers(n_layers, shards.end - 1).end;
            if r.is_empty() {
                Err(PlacementError::Idle {
                    stations,
                    layers: n_layers,
                    station: s,
                })
            } else {
                Ok(r)
            }
        })
        .collect()
}

/// Layers whose station changes when `from` stations become `to` (stations keep their index).
pub fn moved_layers(n_layers: usize, from: usize, to: usize) -> Result<usize, PlacementError> {
    let (a, b) = (layer_ranges(n_layers, from)?, layer_ranges(n_layers, to)?);
    let owner = |ranges: &[Range<usize>], l: usize| ranges.iter().position(|r| r.contains(&l));
    Ok((0..n_layers)
        .filter(|&l| owner(&a, l) != owner(&b, l))
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_deals() {
        let sizes = |n: usize| {
            (0..n)
                .map(|s| station_shards(n, s).len())
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(1), [21]);
        assert_eq!(sizes(2), [11, 10]);
        assert_eq!(sizes(3), [7, 7, 7]);
        assert_eq!(sizes(4), [6, 5, 5, 5]);
    }

    #[test]
    fn every_layer_has_exactly_one_station_in_order() {
        for n_layers in [18, 21, 24, 26, 30, 32, 64] {
            // Virtual shards cover the layers once, in order.
            let mut next = 0;
            for v in 0..VIRTUAL_SHARDS {
                let r = shard_layers(n_layers, v);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, n_layers);
            for stations in 1..=VIRTUAL_SHARDS.min(n_layers) {
                let Ok(ranges) = layer_ranges(n_layers, stations) else {
                    // Fewer layers than shards can leave a station idle; that is refused.
                    assert!(n_layers < VIRTUAL_SHARDS);
                    continue;
                };
                assert_eq!(ranges.len(), stations);
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges.last().unwrap().end, n_layers);
                for w in ranges.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
            }
        }
    }

    #[test]
    fn the_real_models_split_as_documented() {
        // SmolLM2-135M: 30 layers; Gemma-3-270M: 18.
        assert_eq!(layer_ranges(30, 2).unwrap(), [0..16, 16..30]);
        assert_eq!(layer_ranges(30, 4).unwrap(), [0..9, 9..16, 16..23, 23..30]);
        assert_eq!(layer_ranges(18, 4).unwrap(), [0..6, 6..10, 10..14, 14..18]);
    }

    #[test]
    fn bad_station_counts_are_errors() {
        assert!(matches!(
            layer_ranges(30, 0),
            Err(PlacementError::Stations { .. })
        ));
        assert!(matches!(
            layer_ranges(30, 22),
            Err(PlacementError::Stations { .. })
        ));
        assert!(matches!(
            layer_ranges(2, 3),
            Err(PlacementError::Idle { .. })
        ));
    }

    #[test]
    fn a_change_of_station_count_moves_whole_shards() {
        // 1 → 2 stations on 21 layers (one per shard): the second station takes its 10.
        assert_eq!(moved_layers(21, 1, 2).unwrap(), 10);
        assert_eq!(moved_layers(21, 2, 2).unwrap(), 0);
        for n_layers in [21, 30, 42] {
            for from in 1..8 {
                let moved = moved_layers(n_layers, from, from + 1).unwrap();
                // What moves is whole virtual shards: a multiple of a shard's layers when every
                // shard holds the same number.
                if n_layers % VIRTUAL_SHARDS == 0 {
                    assert_eq!(moved % (n_layers / VIRTUAL_SHARDS), 0);
                }
                assert!(moved < n_layers);
            }
        }
    }
}
