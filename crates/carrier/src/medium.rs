//! Positions, fibers and readings of a carrier, and the pipeline over named cells.
//!
//! All position arithmetic is integer arithmetic on `u64` intermediates: `k·b`, `j·S + b − 1`
//! are below 2^64 for any `u32` operands, so nothing overflows.

use crate::error::CarrierError;
use serde::{Deserialize, Serialize};

/// How many machine epsilons of slack the boundary snap allows (see [`snap_position`]).
pub const SNAP_EPSILONS: f64 = 4.0;

/// Source position of `x = u·S` where `x` is known to within `tolerance` (absolute, in
/// positions): the nearest integer when `x` is that close to it, else `⌊x⌋`; `S` (u = 1) is
/// folded onto the last position `S − 1`.
///
/// The caller has checked `0 ≤ x ≤ S (+ tolerance)`.
#[inline]
pub fn snap_position(x: f64, tolerance: f64, source_bandwidth: u32) -> u32 {
    let nearest = x.round();
    let k = if (x - nearest).abs() <= tolerance {
        nearest
    } else {
        x.floor()
    };
    // `as` saturates; k ≤ S ≤ u32::MAX here anyway.
    (k as u32).min(source_bandwidth - 1)
}

/// Tolerance of `x = u·S` for a unit value held as an `f64`: `u` carries at most half an ulp
/// of rounding (relative 2^-53) and the product adds another, so `|x − exact| ≤ ε·x` with
/// `ε = f64::EPSILON`; [`SNAP_EPSILONS`] of those leave a margin for a division or two upstream.
#[inline]
pub fn f64_tolerance(x: f64) -> f64 {
    SNAP_EPSILONS * f64::EPSILON * x
}

/// Source position of a unit value, or `None` for NaN, ±inf or values outside `[0, 1]`.
pub fn source_position(unit_value: f64, source_bandwidth: u32) -> Option<u32> {
    if !unit_value.is_finite() || !(0.0..=1.0).contains(&unit_value) || source_bandwidth == 0 {
        return None;
    }
    let x = unit_value * f64::from(source_bandwidth);
    Some(snap_position(x, f64_tolerance(x), source_bandwidth))
}

/// A contiguous run of source positions `start .. start + size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fiber {
    pub start: u32,
    pub size: u32,
}

/// Observer position of source position `k`: `⌊k·b / S⌋`.
#[inline]
pub fn observer_position(k: u32, observer_bandwidth: u32, source_bandwidth: u32) -> u32 {
    (u64::from(k) * u64::from(observer_bandwidth) / u64::from(source_bandwidth)) as u32
}

/// Every source position that lands on observer position `j` (`j < b`): from `⌈j·S / b⌉` up to
/// `⌈(j+1)·S / b⌉`. Empty when `b > S` and no source position maps to `j`.
#[inline]
pub fn fiber(j: u32, observer_bandwidth: u32, source_bandwidth: u32) -> Fiber {
    let (s, b) = (u64::from(source_bandwidth), u64::from(observer_bandwidth));
    let start = (u64::from(j) * s).div_ceil(b);
    let end = ((u64::from(j) + 1) * s).div_ceil(b);
    Fiber {
        start: start as u32,
        size: (end - start) as u32,
    }
}

/// Whether an observer holds a cell exactly or must evolve to host it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadingKind {
    /// `k·b` divisible by `S`: the observer's position maps back to the same value.
    Resolution,
    /// The observer's carrier would have to gain symbols to host the cell.
    Evolution,
}

impl ReadingKind {
    /// Code in the columnar result: 1 = resolution, 0 = evolution.
    pub fn code(self) -> u8 {
        match self {
            ReadingKind::Resolution => 1,
            ReadingKind::Evolution => 0,
        }
    }

    pub fn from_code(code: u8) -> Self {
        if code == 1 {
            ReadingKind::Resolution
        } else {
            ReadingKind::Evolution
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReadingKind::Resolution => "resolution",
            ReadingKind::Evolution => "evolution",
        }
    }
}

/// What one observer sees of one cell, with the loss witness (copy index, fiber).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    pub observer_bandwidth: u32,
    pub reading: ReadingKind,
    pub observer_position: u32,
    /// `k − fiberStart`: the part of `k` the observer's position alone loses.
    pub copy_index: u32,
    pub fiber_start: u32,
    pub fiber_size: u32,
    /// `fiberSize ≤ b`: an observer of this bandwidth could carry the copy index itself.
    pub copy_index_representable: bool,
}

/// The reading of source position `k` (`k < S`) by an observer of bandwidth `b`.
#[inline]
pub fn read(k: u32, observer_bandwidth: u32, source_bandwidth: u32) -> Reading {
    let kb = u64::from(k) * u64::from(observer_bandwidth);
    let j = (kb / u64::from(source_bandwidth)) as u32;
    let f = fiber(j, observer_bandwidth, source_bandwidth);
    Reading {
        observer_bandwidth,
        reading: if kb % u64::from(source_bandwidth) == 0 {
            ReadingKind::Resolution
        } else {
            ReadingKind::Evolution
        },
        observer_position: j,
        copy_index: k - f.start,
        fiber_start: f.start,
        fiber_size: f.size,
        copy_index_representable: f.size <= observer_bandwidth,
    }
}

/// Source values compatible with a collapsed observation (observer position only).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FiberStates {
    pub observer_bandwidth: u32,
    pub observer_position: u32,
    pub fiber_start: u32,
    pub fiber_size: u32,
    /// The source positions `fiberStart .. fiberStart + fiberSize`.
    pub positions: Vec<u32>,
    /// Each position's representative unit value `k / S` (the lower edge of its cell).
    pub unit_values: Vec<f64>,
    /// `[fiberStart / S, (fiberStart + fiberSize) / S)`: every unit value that collapses to this
    /// observation; the upper end is included only when it is 1.
    pub interval: [f64; 2],
}

/// The most positions [`FiberStates`] lists; larger fibers are an error rather than a huge
/// allocation.
pub const MAX_LISTED_FIBER: u64 = 1 << 20;

/// One named cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cell {
    pub id: String,
    pub unit_value: f64,
}

impl Cell {
    pub fn new(id: impl Into<String>, unit_value: f64) -> Self {
        Cell {
            id: id.into(),
            unit_value,
        }
    }
}

/// One cell's analysis: its source position and one reading per observer, in observer order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellAnalysis {
    pub id: String,
    pub unit_value: f64,
    pub source_position: u32,
    pub readings: Vec<Reading>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MediumAnalysis {
    pub source_bandwidth: u32,
    pub observer_bandwidths: Vec<u32>,
    pub cells: Vec<CellAnalysis>,
}

/// Options as the JS constructor takes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediumOptions {
    pub source_bandwidth: u32,
    pub observer_bandwidths: Vec<u32>,
}

/// Checks a bandwidth list: non-empty, every entry ≥ 1.
pub(crate) fn check_observers(observer_bandwidths: &[u32]) -> Result<(), CarrierError> {
    if observer_bandwidths.is_empty() {
        return Err(CarrierError::NoObservers);
    }
    if let Some(i) = observer_bandwidths.iter().position(|&b| b == 0) {
        return Err(CarrierError::ZeroBandwidth {
            field: format!("observerBandwidths[{i}]"),
        });
    }
    Ok(())
}

/// A source carrier of bandwidth `S` read by one or more observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarrierMediumPipeline {
    source_bandwidth: u32,
    observer_bandwidths: Vec<u32>,
}

impl CarrierMediumPipeline {
    pub fn new(source_bandwidth: u32, observer_bandwidths: Vec<u32>) -> Result<Self, CarrierError> {
        if source_bandwidth == 0 {
            return Err(CarrierError::ZeroBandwidth {
                field: "sourceBandwidth".into(),
            });
        }
        check_observers(&observer_bandwidths)?;
        Ok(CarrierMediumPipeline {
            source_bandwidth,
            observer_bandwidths,
        })
    }

    pub fn from_options(options: MediumOptions) -> Result<Self, CarrierError> {
        Self::new(options.source_bandwidth, options.observer_bandwidths)
    }

    pub fn source_bandwidth(&self) -> u32 {
        self.source_bandwidth
    }

    pub fn observer_bandwidths(&self) -> &[u32] {
        &self.observer_bandwidths
    }

    /// Source position of one cell, with the error naming the cell.
    pub fn source_position(&self, cell: &Cell) -> Result<u32, CarrierError> {
        let u = cell.unit_value;
        if !u.is_finite() {
            return Err(CarrierError::UnitValueNotFinite {
                id: cell.id.clone(),
                value: u,
            });
        }
        source_position(u, self.source_bandwidth).ok_or_else(|| CarrierError::UnitValueOutOfRange {
            id: cell.id.clone(),
            value: u,
        })
    }

    /// Every cell read by every observer. Fails on the first invalid cell, naming it.
    pub fn analyze(&self, cells: &[Cell]) -> Result<MediumAnalysis, CarrierError> {
        let mut out = Vec::with_capacity(cells.len());
        for cell in cells {
            let k = self.source_position(cell)?;
            out.push(CellAnalysis {
                id: cell.id.clone(),
                unit_value: cell.unit_value,
                source_position: k,
                readings: self
                    .observer_bandwidths
                    .iter()
                    .map(|&b| read(k, b, self.source_bandwidth))
                    .collect(),
            });
        }
        Ok(MediumAnalysis {
            source_bandwidth: self.source_bandwidth,
            observer_bandwidths: self.observer_bandwidths.clone(),
            cells: out,
        })
    }

    /// The source values compatible with what remains of `reading` once the copy index is lost:
    /// its observer position at its observer bandwidth, against this pipeline's source bandwidth.
    pub fn fiber_states(&self, reading: &Reading) -> Result<FiberStates, CarrierError> {
        fiber_states(
            self.source_bandwidth,
            reading.observer_bandwidth,
            reading.observer_position,
        )
    }
}

/// [`CarrierMediumPipeline::fiber_states`] without a pipeline.
pub fn fiber_states(
    source_bandwidth: u32,
    observer_bandwidth: u32,
    observer_position: u32,
) -> Result<FiberStates, CarrierError> {
    if source_bandwidth == 0 {
        return Err(CarrierError::ZeroBandwidth {
            field: "sourceBandwidth".into(),
        });
    }
    if observer_bandwidth == 0 {
        return Err(CarrierError::ZeroBandwidth {
            field: "observerBandwidth".into(),
        });
    }
    if observer_position >= observer_bandwidth {
        return Err(CarrierError::InvalidReading {
            field: "observerPosition",
            value: observer_position.into(),
            context: format!("observerBandwidth {observer_bandwidth}"),
        });
    }
    let f = fiber(observer_position, observer_bandwidth, source_bandwidth);
    if u64::from(f.size) > MAX_LISTED_FIBER {
        return Err(CarrierError::FiberTooLarge {
            size: f.size.into(),
            limit: MAX_LISTED_FIBER,
        });
    }
    let s = f64::from(source_bandwidth);
    let positions: Vec<u32> = (f.start..f.start + f.size).collect();
    let unit_values = positions.iter().map(|&k| f64::from(k) / s).collect();
    Ok(FiberStates {
        observer_bandwidth,
        observer_position,
        fiber_start: f.start,
        fiber_size: f.size,
        positions,
        unit_values,
        interval: [f64::from(f.start) / s, f64::from(f.start + f.size) / s],
    })
}

/// Per-observer lookup of the reading of every source position, so the image pipeline does no
/// division per cell. Only built for small `S` (see [`TABLE_LIMIT`]).
#[derive(Debug, Clone)]
pub(crate) struct ReadingTable {
    pub positions: Vec<u32>,
    pub copy_indices: Vec<u32>,
    pub codes: Vec<u8>,
}

/// Largest source bandwidth for which [`ReadingTable`]s are built (9 bytes per entry per observer).
pub(crate) const TABLE_LIMIT: u32 = 1 << 20;

impl ReadingTable {
    pub fn new(observer_bandwidth: u32, source_bandwidth: u32) -> Self {
        let n = source_bandwidth as usize;
        let mut t = ReadingTable {
            positions: Vec::with_capacity(n),
            copy_indices: Vec::with_capacity(n),
            codes: Vec::with_capacity(n),
        };
        for k in 0..source_bandwidth {
            let r = read(k, observer_bandwidth, source_bandwidth);
            t.positions.push(r.observer_position);
            t.copy_indices.push(r.copy_index);
            t.codes.push(r.reading.code());
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds(c: &CellAnalysis) -> Vec<&'static str> {
        c.readings.iter().map(|r| r.reading.as_str()).collect()
    }

    #[test]
    fn seed_example() {
        let p = CarrierMediumPipeline::new(54, vec![3, 54]).unwrap();
        let a = p
            .analyze(&[
                Cell::new("patch-0", 2.0 / 54.0),
                Cell::new("patch-1", 53.0 / 54.0),
            ])
            .unwrap();
        assert_eq!(kinds(&a.cells[0]), ["evolution", "resolution"]);
        assert_eq!(kinds(&a.cells[1]), ["evolution", "resolution"]);
        assert_eq!(a.cells[0].source_position, 2);
        assert_eq!(a.cells[1].source_position, 53);
        let (r0, r1) = (a.cells[0].readings[0], a.cells[1].readings[0]);
        assert_eq!((r0.fiber_size, r1.fiber_size), (18, 18));
        assert_eq!((r0.copy_index, r1.copy_index), (2, 17));
        assert_eq!((r0.observer_position, r1.observer_position), (0, 2));
        assert_eq!((r0.fiber_start, r1.fiber_start), (0, 36));
        assert!(
            !r0.copy_index_representable,
            "18 copies do not fit in 3 symbols"
        );
        // At b = S every fiber is a single position and nothing is lost.
        let full = a.cells[1].readings[1];
        assert_eq!(
            (full.observer_position, full.copy_index, full.fiber_size),
            (53, 0, 1)
        );
        assert!(full.copy_index_representable);
    }

    #[test]
    fn seed_example_json_shape() {
        let p = CarrierMediumPipeline::from_options(
            serde_json::from_str(r#"{"sourceBandwidth":54,"observerBandwidths":[3,54]}"#).unwrap(),
        )
        .unwrap();
        let cells: Vec<Cell> =
            serde_json::from_str(r#"[{"id":"patch-0","unitValue":0.037037037037037035}]"#).unwrap();
        let v = serde_json::to_value(p.analyze(&cells).unwrap()).unwrap();
        let r = &v["cells"][0]["readings"][0];
        assert_eq!(r["reading"], "evolution");
        assert_eq!(r["observerBandwidth"], 3);
        assert_eq!(r["observerPosition"], 0);
        assert_eq!(r["copyIndex"], 2);
        assert_eq!(r["fiberStart"], 0);
        assert_eq!(r["fiberSize"], 18);
        assert_eq!(r["copyIndexRepresentable"], false);
        assert_eq!(v["cells"][0]["readings"][1]["reading"], "resolution");
        // An id that is not a string is refused at the boundary.
        assert!(serde_json::from_str::<Vec<Cell>>(r#"[{"id":3,"unitValue":0.5}]"#).is_err());
    }

    #[test]
    fn zero_and_eighteen_are_resolutions_at_three() {
        let p = CarrierMediumPipeline::new(54, vec![3]).unwrap();
        let a = p
            .analyze(&[
                Cell::new("a", 0.0),
                Cell::new("b", 18.0 / 54.0),
                Cell::new("c", 36.0 / 54.0),
                Cell::new("d", 1.0),
            ])
            .unwrap();
        let kinds: Vec<_> = a.cells.iter().map(|c| c.readings[0].reading).collect();
        use ReadingKind::*;
        assert_eq!(kinds, [Resolution, Resolution, Resolution, Evolution]);
        assert_eq!(a.cells[1].readings[0].observer_position, 1);
        assert_eq!(a.cells[1].readings[0].copy_index, 0);
        // u = 1 is folded onto the last position.
        assert_eq!(a.cells[3].source_position, 53);
    }

    fn fibers(b: u32, s: u32) -> Vec<Fiber> {
        (0..b).map(|j| fiber(j, b, s)).collect()
    }

    #[test]
    fn unequal_fibers_partition_54() {
        let sizes = |b| fibers(b, 54).iter().map(|f| f.size).collect::<Vec<_>>();
        assert_eq!(sizes(5), [11, 11, 11, 11, 10]);
        assert_eq!(sizes(7), [8, 8, 8, 7, 8, 8, 7]);
        for b in [5, 7] {
            let mut next = 0;
            for (j, f) in fibers(b, 54).into_iter().enumerate() {
                assert_eq!(f.start, next);
                for k in f.start..f.start + f.size {
                    assert_eq!(observer_position(k, b, 54), j as u32);
                }
                next += f.size;
            }
            assert_eq!(next, 54);
        }
    }

    #[test]
    fn every_observer_bandwidth_of_54() {
        for b in 1..=54 {
            let divides = 54 % b == 0;
            for k in 0..54 {
                let r = read(k, b, 54);
                assert_eq!(r.fiber_start + r.copy_index, k);
                assert!(r.copy_index < r.fiber_size);
                if divides {
                    assert_eq!(r.fiber_size, 54 / b);
                    assert_eq!(r.reading == ReadingKind::Resolution, k % (54 / b) == 0);
                }
            }
        }
    }

    #[test]
    fn snapping_holds_every_boundary_up_to_4096() {
        for s in 1..=4096u32 {
            for i in 0..=s {
                let u = f64::from(i) / f64::from(s);
                assert_eq!(source_position(u, s), Some(i.min(s - 1)), "{i}/{s}");
            }
        }
    }

    #[test]
    fn snapping_leaves_values_off_the_boundary_alone() {
        for s in [3u32, 54, 255, 1000, 4096] {
            for i in 1..s {
                let u = f64::from(i) / f64::from(s);
                // A millionth of a position below the boundary is genuinely below it.
                let below = u - 1e-6 / f64::from(s);
                assert_eq!(source_position(below, s), Some(i - 1), "{i}/{s} - d");
                let above = u + 1e-6 / f64::from(s);
                assert_eq!(source_position(above, s), Some(i), "{i}/{s} + d");
                let mid = (f64::from(i) + 0.5) / f64::from(s);
                assert_eq!(source_position(mid, s), Some(i), "{i}.5/{s}");
            }
        }
        // Plain flooring would fail here: 15/22·22 is 14.999999999999998 in f64 (one of
        // 312,720 such i/S with S ≤ 4096).
        let (i, s) = (std::hint::black_box(15.0f64), std::hint::black_box(22.0f64));
        assert!((i / s) * s < i);
        assert_eq!(source_position(15.0 / 22.0, 22), Some(15));
        assert_eq!(source_position(53.0 / 54.0, 54), Some(53));
    }

    #[test]
    fn validation_errors_name_the_field_or_cell() {
        let e = CarrierMediumPipeline::new(0, vec![3]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "sourceBandwidth must be an integer >= 1, got 0"
        );
        let e = CarrierMediumPipeline::new(54, vec![]).unwrap_err();
        assert_eq!(e, CarrierError::NoObservers);
        let e = CarrierMediumPipeline::new(54, vec![3, 0]).unwrap_err();
        assert!(e.to_string().starts_with("observerBandwidths[1] "), "{e}");

        let p = CarrierMediumPipeline::new(54, vec![3]).unwrap();
        for (value, want) in [
            (f64::NAN, "not a finite number"),
            (f64::INFINITY, "not a finite number"),
            (f64::NEG_INFINITY, "not a finite number"),
            (-0.001, "outside [0, 1]"),
            (1.0 + 1e-9, "outside [0, 1]"),
        ] {
            let cells = [Cell::new("ok", 0.5), Cell::new("bad-cell", value)];
            let e = p.analyze(&cells).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("\"bad-cell\"") && msg.contains(want), "{msg}");
        }
    }

    #[test]
    fn fiber_states_of_a_collapsed_reading() {
        let p = CarrierMediumPipeline::new(54, vec![3]).unwrap();
        let a = p.analyze(&[Cell::new("x", 53.0 / 54.0)]).unwrap();
        let st = p.fiber_states(&a.cells[0].readings[0]).unwrap();
        assert_eq!(st.positions, (36..54).collect::<Vec<_>>());
        assert_eq!(st.unit_values.len(), 18);
        assert_eq!(st.unit_values[17], 53.0 / 54.0);
        assert_eq!(st.interval, [36.0 / 54.0, 1.0]);
        // Every listed value analyzes back to the same observer position.
        for &u in &st.unit_values {
            let k = source_position(u, 54).unwrap();
            assert_eq!(observer_position(k, 3, 54), 2);
        }
        let mut bad = a.cells[0].readings[0];
        bad.observer_position = 3;
        let e = p.fiber_states(&bad).unwrap_err();
        assert!(e.to_string().contains("observerPosition 3"), "{e}");
        bad.observer_bandwidth = 0;
        assert!(p.fiber_states(&bad).is_err());
        let e = fiber_states(u32::MAX, 1, 0).unwrap_err();
        assert!(matches!(e, CarrierError::FiberTooLarge { .. }));
    }

    #[test]
    fn extreme_bandwidths_do_not_overflow() {
        let s = u32::MAX;
        let r = read(s - 1, s, s);
        assert_eq!(
            (r.observer_position, r.copy_index, r.fiber_size),
            (s - 1, 0, 1)
        );
        let r = read(s - 1, 1, s);
        assert_eq!(
            (r.observer_position, r.copy_index, r.fiber_size),
            (0, s - 1, s)
        );
        // More observer symbols than source positions: fibers of 0 or 1, each k still found.
        let r = read(1, 10, 3);
        assert_eq!(
            (r.observer_position, r.fiber_start, r.fiber_size),
            (3, 1, 1)
        );
        assert_eq!(fiber(1, 10, 3).size, 0);
        assert_eq!(source_position(1.0, s), Some(s - 1));
        assert_eq!(source_position(0.5, s), Some(s / 2));
    }

    #[test]
    fn reading_table_matches_arithmetic() {
        for (b, s) in [(3, 54), (5, 54), (7, 54), (54, 54), (100, 54), (1, 1)] {
            let t = ReadingTable::new(b, s);
            for k in 0..s {
                let r = read(k, b, s);
                let i = k as usize;
                assert_eq!(t.positions[i], r.observer_position);
                assert_eq!(t.copy_indices[i], r.copy_index);
                assert_eq!(ReadingKind::from_code(t.codes[i]), r.reading);
            }
        }
    }

    proptest! {
        #[test]
        fn fibers_partition_the_positions(s in 1u32..3000, b in 1u32..3000) {
            let mut next = 0u32;
            for j in 0..b {
                let f = fiber(j, b, s);
                prop_assert_eq!(f.start, next);
                next += f.size;
            }
            prop_assert_eq!(next, s);
        }

        #[test]
        fn reading_is_lossless_with_its_copy_index(
            s in 1u32..=u32::MAX, b in 1u32..=u32::MAX, k_frac in 0.0f64..1.0
        ) {
            let k = ((k_frac * f64::from(s)) as u32).min(s - 1);
            let r = read(k, b, s);
            prop_assert!(r.copy_index < r.fiber_size);
            prop_assert_eq!(r.fiber_start + r.copy_index, k);
            prop_assert!(r.observer_position < b);
            let f = fiber(r.observer_position, b, s);
            prop_assert_eq!((f.start, f.size), (r.fiber_start, r.fiber_size));
            prop_assert_eq!(r.copy_index_representable, r.fiber_size <= b);
            // Resolution exactly when the position maps back to the same value.
            let back = u64::from(r.observer_position) * u64::from(s);
            let exact = back % u64::from(b) == 0 && back / u64::from(b) == u64::from(k);
            prop_assert_eq!(r.reading == ReadingKind::Resolution, exact);
        }

        #[test]
        fn fiber_members_read_to_the_same_position(s in 1u32..500, b in 1u32..500, k in 0u32..500) {
            let k = k % s;
            let r = read(k, b, s);
            for m in r.fiber_start..r.fiber_start + r.fiber_size {
                prop_assert_eq!(observer_position(m, b, s), r.observer_position);
            }
            if r.fiber_start > 0 {
                prop_assert!(observer_position(r.fiber_start - 1, b, s) < r.observer_position);
            }
            if r.fiber_start + r.fiber_size < s {
                prop_assert!(observer_position(r.fiber_start + r.fiber_size, b, s) > r.observer_position);
            }
        }

        #[test]
        fn unit_value_positions_are_floors_away_from_boundaries(s in 1u32..100_000, u in 0.0f64..=1.0) {
            let k = source_position(u, s).unwrap();
            prop_assert!(k < s);
            let x = u * f64::from(s);
            let dist = (x - x.round()).abs();
            if dist > 1e-9 {
                prop_assert_eq!(k, (x.floor() as u32).min(s - 1));
            }
        }
    }
}
