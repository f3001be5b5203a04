//! The model's weights as the host holds them — the resident tensors, and the layers: where each
//! lives in the file, the cache in front of the source — and the pass that streams the layers
//! through the sessions of a step.
//!
//! A pass is layer-major: every position of the batch goes through layer L before layer L+1 is
//! needed, so a prompt costs one read per layer at most. While layer L computes, the next layers
//! are being fetched; after the last layer, layer 0.. of the next token when one follows.

use crate::cache::{CacheStats, LayerBytes, LayerCache, LayerFetch, Lookup};
use crate::error::HostError;
use crate::pool::BufferPool;
use crate::reader::Reader;
use crate::source::SourceError;
use engine::{
    EngineError, Joint, LayerLayout, LayerWeights, ResidentLayout, ResidentWeights, Session,
};
use futures::FutureExt;
use std::ops::Range;
use std::rc::Rc;

/// The tensors held for the whole session (embedding, final norm, LM head): their bytes, read
/// once at open, and where each sits in them.
pub(crate) struct Resident {
    pub bytes: Vec<u8>,
    pub layout: ResidentLayout,
}

impl Resident {
    pub fn weights(&self) -> Result<ResidentWeights<'_>, HostError> {
        Ok(self.layout.view(&self.bytes)?)
    }
}

/// Which logits a pass computes.
pub(crate) use engine::LogitRows as Logits;

/// The layers and the cache in front of the source.
pub(crate) struct LayerStore {
    reader: Reader,
    ranges: Vec<Range<u64>>,
    /// Where each layer's tensors sit in its span, located and checked once at open.
    layouts: Vec<LayerLayout>,
    cache: LayerCache,
    /// Buffers of evicted layers, read into again (two: one evicted per fetch in a stream).
    pool: Rc<BufferPool>,
    /// Layers fetched ahead of the one computing (0: no prefetch).
    prefetch_depth: usize,
}

impl LayerStore {
    pub fn new(
        reader: Reader,
        ranges: Vec<Range<u64>>,
        layouts: Vec<LayerLayout>,
        cache: LayerCache,
        prefetch_depth: usize,
    ) -> Self {
        LayerStore {
            reader,
            ranges,
            layouts,
            cache,
            pool: BufferPool::new(2),
            prefetch_depth,
        }
    }

    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Starts fetching `layer` in the background unless it is cached or in flight.
    pub fn prefetch(&mut self, layer: usize) {
        if let Lookup::Missing = self.cache.lookup(layer, false) {
            // The cache keeps the shared fetch; whoever needs the layer awaits it there.
            drop(self.start_fetch(layer));
        }
    }

    /// Fetches `layer` now and waits until it is resident.
    pub async fn load(&mut self, layer: usize) -> Result<(), SourceError> {
        self.get(layer, false).await.map(drop)
    }

    /// Waits for every read still in flight and keeps what they bring; a failed one is
    /// forgotten.
    pub async fn drain(&mut self) {
        for (layer, fetch) in self.cache.in_flight() {
            let result = fetch.await;
            self.cache.finish_fetch(layer, &result);
        }
        self.cache.trim();
    }

    /// Forgets the reads in flight without waiting for them; returns how many.
    pub fn drop_reads(&mut self) -> usize {
        let dropped = self.cache.drop_fetches();
        self.cache.trim();
        dropped
    }

    /// Runs the sessions' batches (`batches[i]` for `sessions[i]`) through every layer together
    /// (`joint`: their rows share each matmul) and ends each with the logits `want[i]` names.
    /// On failure every session's batch is abandoned, or the session reset when its
    /// conversation cannot be restored (the caller ends their sequences).
    pub async fn joint_pass(
        &mut self,
        joint: &mut Joint,
        sessions: &mut [&mut Session],
        batches: &[&[u32]],
        want: &[Logits],
        resident: &Resident,
        more_follows: bool,
    ) -> Result<(), HostError> {
        let ran = async {
            let weights = resident.weights()?;
            for (s, batch) in sessions.iter_mut().zip(batches) {
                joint.begin(s, batch, &weights)?;
            }
            joint.prepare(sessions)?;
            let mut run = |l: usize, w: &LayerWeights| joint.run_layer(sessions, l, w);
            self.run_layers(&mut run, more_follows).await?;
            Ok(joint.finish(sessions, want, &weights)?)
        }
        .await;
        if ran.is_err() {
            for s in sessions.iter_mut() {
                // A batch that overwrote ring slots its conversation still needs loses it.
                if !s.abort_batch() {
                    s.reset();
                }
            }
        }
        ran
    }

    /// Streams every layer through `run` in order, prefetching ahead.
    async fn run_layers(
        &mut self,
        run: &mut dyn FnMut(usize, &LayerWeights) -> Result<(), EngineError>,
        more_follows: bool,
    ) -> Result<(), HostError> {
        let n = self.ranges.len();
        self.stock_pool(self.prefetch_depth + 1);
        for l in 0..n {
            if self.reader.abort_handle().is_aborted() {
                return Err(HostError::Aborted);
            }
            let bytes = self.get(l, true).await?;
            self.cache.pin(l);
            // Start the next layers' reads now, so they travel while this layer computes; past
            // the last layer they are layer 0.. of the next token, when one follows.
            for ahead in 1..=self.prefetch_depth {
                if l + ahead >= n && !more_follows {
                    break;
                }
                self.prefetch((l + ahead) % n);
            }
            let result = self.layouts[l].view(&bytes).and_then(|w| run(l, &w));
            self.cache.unpin(l);
            result?;
        }
        Ok(())
    }

    /// Allocates, before a pass starts reading, a buffer for each layer it will read while
    /// others are in flight (the missing ones, up to `in_flight`, and never more than the cache
    /// has room for, so the layer memory stays within the plan): memory that grows while JS
    /// writes into it detaches the write's view, and that read has to be made again.
    fn stock_pool(&self, in_flight: usize) {
        if !self.reader.fills_buffers() {
            return;
        }
        let missing = (0..self.ranges.len()).filter(|&l| !self.cache.contains(l));
        let spans = missing.map(|l| self.ranges[l].end - self.ranges[l].start);
        let (count, largest) = spans.fold((0, 0), |(c, m), s| (c + 1, m.max(s)));
        let count = count.min(in_flight).min(self.cache.room(largest));
        self.pool
            .stock(count, usize::try_from(largest).unwrap_or(0));
    }

    fn start_fetch(&mut self, layer: usize) -> LayerFetch {
        let r = &self.ranges[layer];
        let fut = self
            .reader
            .read_pooled(r.start, r.end, &self.pool)
            .map(|r| r.map(Rc::new));
        self.cache.start_fetch(layer, fut.boxed_local())
    }

    async fn get(&mut self, layer: usize, demand: bool) -> Result<LayerBytes, SourceError> {
        let fetch = match self.cache.lookup(layer, demand) {
            Lookup::Ready(b) => return Ok(b),
            Lookup::Missing => self.start_fetch(layer),
            Lookup::Fetching(f) => {
                let result = f.await;
                self.cache.finish_fetch(layer, &result);
                match result {
                    // A read started earlier (a prefetch, perhaps under an abort since passed)
                    // failed: this caller gets a read of its own rather than that old failure.
                    Err(_) if !self.reader.abort_handle().is_aborted() => self.start_fetch(layer),
                    done => return done,
                }
            }
        };
        let result = fetch.await;
        self.cache.finish_fetch(layer, &result);
        result
    }
}
