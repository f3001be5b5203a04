//! Matmul rows split across threads. A matmul's output rows are independent: each is one row
//! dot computed by one thread exactly as a single thread computes it, so the result is
//! bit-identical at every thread count. The pool is process-wide ([`set_threads`]); without
//! threads (a wasm build without atomics, or a count of 1) every matmul runs on the calling
//! thread. In a wasm build with atomics JS starts the workers: [`begin_pool`], then each worker
//! [`join_pool`] and [`PoolWorker::work`], then [`use_pool`].

use super::QMatrix;

/// The most threads a pool takes.
pub const MAX_THREADS: usize = 256;
#[cfg(threads)]
/// Multiply-adds below which a matmul stays on the calling thread (handing work to the pool
/// costs a few microseconds).
const MIN_PARALLEL_WORK: usize = 1 << 16;
#[cfg(threads)]
/// The most outputs a multi-token matmul splits (its parts' outputs go through a buffer of this
/// size, kept per thread): a larger one — the LM head over every position of a long prompt —
/// runs on the calling thread.
const MAX_SPLIT_OUTPUTS: usize = 1 << 22;
#[cfg(threads)]
/// Rows per chunk are a multiple of this (the kernels' row tile).
const ROW_ALIGN: usize = super::tile::ROW_TILE;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThreadsError {
    #[error("threads must be in 1..={MAX_THREADS}, got {0}")]
    Count(usize),
    #[error("this build has no threads (asked for {0}); use 1")]
    Unavailable(usize),
    #[error("the thread pool could not be started: {0}")]
    Pool(String),
    #[error("{asked} threads asked for, {started} started: this build's workers are started from JS (the package does it)")]
    NotStarted { asked: usize, started: usize },
    #[error("thread pool {pool} has no part {part} waiting to be joined")]
    Join { pool: u32, part: usize },
    #[error("thread pool {0} is not begun, or not every worker has joined it")]
    Unjoined(u32),
}

/// The cores this machine offers (1 where that is unknown or there are no threads; in wasm JS
/// knows, not this).
pub fn available_threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
    #[cfg(target_arch = "wasm32")]
    {
        1
    }
}

#[cfg(threads)]
mod current {
    use super::super::pool::Pool;
    use std::sync::{Arc, RwLock};

    /// `None` until set: the first matmul then takes every core.
    pub(super) static POOL: RwLock<Option<Option<Arc<Pool>>>> = RwLock::new(None);

    thread_local! {
        /// A count this thread runs its matmuls at for a while ([`super::with_threads`]).
        pub(super) static LOCAL: std::cell::RefCell<Option<Option<Arc<Pool>>>> =
            const { std::cell::RefCell::new(None) };
    }

    pub(super) fn build(n: usize) -> Result<Option<Arc<Pool>>, super::ThreadsError> {
        if n == 1 {
            return Ok(None);
        }
        // In wasm only the pool JS started (`use_pool`) has workers.
        #[cfg(target_arch = "wasm32")]
        {
            let started = POOL.read().ok().and_then(|p| p.clone()).flatten();
            match started {
                Some(p) if p.threads() == n => Ok(Some(p)),
                p => Err(super::ThreadsError::NotStarted {
                    asked: n,
                    started: p.map_or(1, |p| p.threads()),
                }),
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        Pool::new(n)
            .map(|p| Some(Arc::new(p)))
            .map_err(|e| super::ThreadsError::Pool(e.to_string()))
    }

    pub(super) fn pool() -> Option<Arc<Pool>> {
        if let Some(pool) = LOCAL.with(|l| l.borrow().clone()) {
            return pool;
        }
        if let Some(pool) = POOL.read().ok().and_then(|p| p.clone()) {
            return pool;
        }
        // Unset: every core (a pool that cannot start leaves one thread). In wasm: one thread
        // until JS starts a pool.
        #[cfg(not(target_arch = "wasm32"))]
        if super::set_threads(super::available_threads()).is_err() {
            if let Ok(mut slot) = POOL.write() {
                slot.get_or_insert(None);
            }
        }
        POOL.read().ok().and_then(|p| p.clone()).flatten()
    }
}

/// Sets the threads every matmul of this process splits its rows across (1: none; unset, every
/// core). Matmuls in flight finish on the pool they began on.
pub fn set_threads(n: usize) -> Result<(), ThreadsError> {
    if n == 0 || n > MAX_THREADS {
        return Err(ThreadsError::Count(n));
    }
    #[cfg(threads)]
    {
        let same = current::POOL
            .read()
            .ok()
            .and_then(|p| p.clone())
            .map(|p| p.map_or(1, |p| p.threads()));
        if same == Some(n) {
            return Ok(());
        }
        let pool = current::build(n)?;
        if let Ok(mut slot) = current::POOL.write() {
            *slot = Some(pool);
        }
        Ok(())
    }
    #[cfg(not(threads))]
    {
        match n {
            1 => Ok(()),
            _ => Err(ThreadsError::Unavailable(n)),
        }
    }
}

#[cfg(all(threads, target_arch = "wasm32"))]
pub use wasm_pool::{begin_pool, join_pool, use_pool, PoolWorker};

/// Starting a pool in wasm, where only JS can start threads: [`begin_pool`] makes a pool whose
/// workers have not come yet; each worker JS starts calls [`join_pool`] and then
/// [`PoolWorker::work`] (which returns when the pool ends); once all have joined, [`use_pool`]
/// makes it the process's pool (the one before it ends, its workers return).
#[cfg(all(threads, target_arch = "wasm32"))]
mod wasm_pool {
    use super::super::pool::{Pool, PoolWorker as Worker};
    use super::{current, ThreadsError, MAX_THREADS};
    use std::sync::{Arc, Mutex};

    /// Pools begun and not yet in use, by id.
    static BEGUN: Mutex<Vec<(u32, Arc<Pool>)>> = Mutex::new(Vec::new());
    static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

    /// A worker's part of a pool, to run on the worker's own thread.
    pub struct PoolWorker(Worker);

    impl PoolWorker {
        /// Runs this part of every job until the pool ends (blocks: a worker thread's loop).
        pub fn work(self) {
            self.0.work()
        }
    }

    /// A pool of `n` parts (2..=MAX_THREADS) waiting for its `n - 1` workers; returns its id.
    pub fn begin_pool(n: usize) -> Result<u32, ThreadsError> {
        if !(2..=MAX_THREADS).contains(&n) {
            return Err(ThreadsError::Count(n));
        }
        let pool = Pool::new(n).map_err(|e| ThreadsError::Pool(e.to_string()))?;
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut begun = BEGUN.lock().unwrap_or_else(|e| e.into_inner());
        begun.push((id, Arc::new(pool)));
        Ok(id)
    }

    /// Part `part` (1..n) of pool `id`, each once.
    pub fn join_pool(id: u32, part: usize) -> Result<PoolWorker, ThreadsError> {
        let begun = BEGUN.lock().unwrap_or_else(|e| e.into_inner());
        begun
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, p)| p.join(part))
            .map(PoolWorker)
            .ok_or(ThreadsError::Join { pool: id, part })
    }

    /// Makes pool `id` (every worker joined) the process's pool.
    pub fn use_pool(id: u32) -> Result<(), ThreadsError> {
        let pool = {
            let mut begun = BEGUN.lock().unwrap_or_else(|e| e.into_inner());
            let at = begun
                .iter()
                .position(|(i, p)| *i == id && p.all_joined())
                .ok_or(ThreadsError::Unjoined(id))?;
            begun.remove(at).1
        };
        if let Ok(mut slot) = current::POOL.write() {
            *slot = Some(Some(pool));
        }
        Ok(())
    }
}

/// Runs `f` with the matmuls this thread starts split across `n` threads (a pool of its own,
/// for `f` alone), whatever the process's setting: tests compare counts side by side this way.
pub fn with_threads<R>(n: usize, f: impl FnOnce() -> R) -> Result<R, ThreadsError> {
    if n == 0 || n > MAX_THREADS {
        return Err(ThreadsError::Count(n));
    }
    #[cfg(threads)]
    {
        let pool = current::build(n)?;
        let before = current::LOCAL.with(|l| l.replace(Some(pool)));
        // Put back even if `f` panics (a test's assertion).
        struct Restore(Option<Option<std::sync::Arc<super::pool::Pool>>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let before = self.0.take();
                current::LOCAL.with(|l| *l.borrow_mut() = before);
            }
        }
        let _restore = Restore(before);
        Ok(f())
    }
    #[cfg(not(threads))]
    {
        match n {
            1 => Ok(f()),
            _ => Err(ThreadsError::Unavailable(n)),
        }
    }
}

/// The threads matmuls split across now (on this thread).
pub fn threads() -> usize {
    #[cfg(threads)]
    {
        current::pool().map_or(1, |p| p.threads())
    }
    #[cfg(not(threads))]
    {
        1
    }
}

/// The most matrices one [`split_rows`] (one hand-off) takes: a layer's q, k and v.
pub const MAX_FUSED: usize = 3;

/// Runs `kernel(m, ..)` (matrix `m`'s matmul of `n` tokens over some of its rows into a
/// token-major output of those rows) over all of each `ws[m].0` into `ws[m].1`
/// (`[n, rows]`): on the calling thread, or in row chunks across the pool — every matrix in
/// the same hand-off — each chunk's rows written where the whole matmul writes them.
pub(super) fn split_rows(
    ws: &mut [(&QMatrix, &mut [f32])],
    cols: usize,
    n: usize,
    kernel: &(dyn Fn(usize, &QMatrix, &mut [f32]) + Sync),
) {
    #[cfg(threads)]
    {
        let rows: usize = ws.iter().map(|(w, _)| w.rows()).sum();
        let pool = current::pool().filter(|p| {
            p.threads() > 1
                && rows * cols * n >= MIN_PARALLEL_WORK
                && (n == 1 || n * rows <= MAX_SPLIT_OUTPUTS)
        });
        if let Some(pool) = pool {
            split_across(&pool, ws, n, kernel);
            return;
        }
    }
    let _ = (cols, n);
    for (m, (w, out)) in ws.iter_mut().enumerate() {
        if w.rows() > 0 {
            kernel(m, w, out);
        }
    }
}

/// [`split_rows`] across `pool`: part i computes chunk i of every matrix, writing
/// `[n, its rows]` at `n · start` of that matrix's destination — its `out` for one token (a
/// contiguous run of it), else its region of a buffer whose rows then go where the whole
/// matmul writes them.
#[cfg(threads)]
fn split_across(
    pool: &super::pool::Pool,
    ws: &mut [(&QMatrix, &mut [f32])],
    n: usize,
    kernel: &(dyn Fn(usize, &QMatrix, &mut [f32]) + Sync),
) {
    let parts = pool.threads();
    // Rows per part, a multiple of the kernels' row tile.
    let chunk = |rows: usize, i: usize| {
        let per = rows.div_ceil(parts).div_ceil(ROW_ALIGN) * ROW_ALIGN;
        (i * per).min(rows)..((i + 1) * per).min(rows)
    };
    let run = |mats: &[Option<&QMatrix>; MAX_FUSED], dst: &[Shared<f32>; MAX_FUSED]| {
        pool.run(&|i| {
            for (m, w) in mats.iter().enumerate() {
                let Some(w) = w else { continue };
                let r = chunk(w.rows(), i);
                if let Some(part) = w.rows_slice(r.clone()) {
                    // SAFETY: parts' row ranges are disjoint, and each region n·start..n·end
                    // lies inside its matrix's destination, which outlives the run; each part
                    // writes only its own.
                    let mine = unsafe {
                        std::slice::from_raw_parts_mut(dst[m].get().add(n * r.start), n * r.len())
                    };
                    kernel(m, &part, mine);
                }
            }
        })
    };
    let mut mats = [None; MAX_FUSED];
    let mut dst = [Shared(std::ptr::null_mut()); MAX_FUSED];
    if n == 1 {
        for ((slot, d), (w, out)) in mats.iter_mut().zip(&mut dst).zip(ws.iter_mut()) {
            (*slot, *d) = (Some(&**w), Shared(out.as_mut_ptr()));
        }
        return run(&mats, &dst);
    }
    SPLIT.with(|buf| {
        let mut buf = buf.borrow_mut();
        let total: usize = ws.iter().map(|(w, _)| w.rows()).sum();
        buf.clear();
        buf.resize(n * total, 0.0);
        let (at, mut base) = (buf.as_mut_ptr(), 0);
        for ((slot, d), (w, _)) in mats.iter_mut().zip(&mut dst).zip(ws.iter()) {
            *slot = Some(&**w);
            *d = Shared(at.wrapping_add(n * base));
            base += w.rows();
        }
        run(&mats, &dst);
        let mut base = 0;
        for (w, out) in ws.iter_mut() {
            let rows = w.rows();
            for i in 0..parts {
                let r = chunk(rows, i);
                let part = &buf[n * (base + r.start)..n * (base + r.end)];
                for t in 0..n {
                    out[t * rows + r.start..t * rows + r.end]
                        .copy_from_slice(&part[t * r.len()..(t + 1) * r.len()]);
                }
            }
            base += rows;
        }
    });
}

/// A pointer the parts of one run share, each writing its own region of what it points into.
pub(crate) struct Shared<T>(*mut T);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Shared<T> {}

impl<T> Shared<T> {
    pub(crate) fn new(p: *mut T) -> Self {
        Shared(p)
    }

    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

// SAFETY: only used to hand the parts of a run disjoint regions of a buffer that outlives the
// run (each user says which region is whose).
unsafe impl<T> Sync for Shared<T> {}
unsafe impl<T> Send for Shared<T> {}

/// Runs `f(part, parts)` for every part across the pool when there is one and `work` (an
/// estimate in multiply-adds) pays for it, with `items` ≥ 2 to share; returns false (nothing
/// ran) otherwise, for the caller to do the work itself.
pub(crate) fn parts(items: usize, work: usize, f: &(dyn Fn(usize, usize) + Sync)) -> bool {
    #[cfg(threads)]
    if items >= 2 && work >= MIN_PARALLEL_WORK {
        if let Some(pool) = current::pool() {
            let parts = pool.threads().min(items);
            pool.run(&|i| {
                if i < parts {
                    f(i, parts)
                }
            });
            return true;
        }
    }
    let _ = (items, work, f);
    false
}

#[cfg(threads)]
thread_local! {
    /// The parts' outputs of a multi-token matmul before they go into place (kept per thread).
    static SPLIT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}
