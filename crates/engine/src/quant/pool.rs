//! A small pool of threads that run one job at a time, each thread its own part: what a matmul
//! needs hundreds of times per token. A decode step's matmuls take microseconds each, less than
//! waking a sleeping thread takes, so the workers keep checking for a while after each job
//! (spinning, then yielding) before they sleep, as llama.cpp's pool does; an idle pool sleeps and
//! costs nothing.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Busy-waits before yielding the core between checks (a job usually comes within these).
const SPINS: u32 = 256;

/// A job: called once with each part index `0..threads`.
type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Bumped for every job (and at the pool's end); a worker runs the job when it sees a new
    /// value. 32 bits: wasm's futex waits on it.
    epoch: AtomicU32,
    /// Where the job of the current epoch is (on the submitter's stack, valid from the bump
    /// until `remaining` reaches 0); null at the pool's end.
    job: AtomicPtr<*const Job>,
    /// Workers that have not finished the current job.
    remaining: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    park: park::Park,
}

pub(super) struct Pool {
    shared: Arc<Shared>,
    /// Threads besides the caller's.
    helpers: usize,
    /// Natively the pool's own threads; in wasm JS starts them and each joins ([`Pool::join`]).
    #[cfg(not(target_arch = "wasm32"))]
    workers: Vec<std::thread::JoinHandle<()>>,
    #[cfg(target_arch = "wasm32")]
    joined: Mutex<Vec<bool>>,
    /// One job at a time: a caller finding the pool busy runs its work on its own thread.
    submit: Mutex<()>,
}

/// A worker's hold on its pool: [`PoolWorker::work`] runs its part of every job until the pool
/// ends.
pub(super) struct PoolWorker {
    shared: Arc<Shared>,
    part: usize,
}

impl PoolWorker {
    pub(super) fn work(self) {
        work(&self.shared, self.part)
    }
}

impl Pool {
    /// A pool of `threads` parts: the calling thread and `threads - 1` workers (natively started
    /// here; in wasm each must [`Pool::join`] before a job can finish).
    pub(super) fn new(threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            epoch: AtomicU32::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: park::Park::new(),
        });
        let helpers = threads.saturating_sub(1);
        #[cfg(not(target_arch = "wasm32"))]
        {
            let mut pool = Pool {
                shared,
                helpers,
                workers: Vec::with_capacity(helpers),
                submit: Mutex::new(()),
            };
            for part in 1..=helpers {
                let w = PoolWorker {
                    shared: pool.shared.clone(),
                    part,
                };
                // Those started stop with the pool when one cannot start.
                let h = std::thread::Builder::new()
                    .name(format!("knot-matmul-{part}"))
                    .spawn(move || w.work())?;
                pool.workers.push(h);
            }
            Ok(pool)
        }
        #[cfg(target_arch = "wasm32")]
        Ok(Pool {
            shared,
            helpers,
            joined: Mutex::new(vec![false; helpers]),
            submit: Mutex::new(()),
        })
    }

    /// The worker for `part` (1..threads), once: a wasm thread JS started calls this, then
    /// [`PoolWorker::work`].
    #[cfg(target_arch = "wasm32")]
    pub(super) fn join(&self, part: usize) -> Option<PoolWorker> {
        let mut joined = self.joined.lock().unwrap_or_else(|e| e.into_inner());
        let slot = joined.get_mut(part.checked_sub(1)?)?;
        if std::mem::replace(slot, true) {
            return None;
        }
        Some(PoolWorker {
            shared: self.shared.clone(),
            part,
        })
    }

    /// Whether every worker has joined ([`Pool::join`]).
    #[cfg(target_arch = "wasm32")]
    pub(super) fn all_joined(&self) -> bool {
        let joined = self.joined.lock().unwrap_or_else(|e| e.into_inner());
        joined.iter().all(|&j| j)
    }

    /// Parts a job is cut into.
    pub(super) fn threads(&self) -> usize {
        self.helpers + 1
    }

    /// Runs `job(i)` for every part `i` at once, part 0 on the calling thread, and returns when
    /// all are done. When another job holds the pool, every part runs here, in order. The
    /// caller only spins while it waits: a browser's main thread may not block.
    pub(super) fn run(&self, job: &(dyn Fn(usize) + Sync + '_)) {
        let Ok(_held) = self.submit.try_lock() else {
            (0..self.threads()).for_each(job);
            return;
        };
        let s = &*self.shared;
        // SAFETY: the lifetime is erased only while this call waits for every worker to finish
        // with the job (below), so the job outlives every use of the pointer.
        let erased: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        // Workers read it after the epoch bump; it stays here until they are done.
        let mut at = erased;
        s.job.store(&mut at, Ordering::SeqCst);
        s.remaining.store(self.helpers, Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            s.park.wake_all(s);
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        let mut spins = 0u32;
        while s.remaining.load(Ordering::Acquire) != 0 {
            // A worker not yet scheduled (more threads than cores) needs this core.
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a matmul worker panicked");
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stop.store(true, Ordering::SeqCst);
        // Workers see the bump below and then `stop`, never this empty job.
        s.job.store(std::ptr::null_mut(), Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        s.park.wake_all(s);
        #[cfg(not(target_arch = "wasm32"))]
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// A worker: waits for each new epoch (spinning, then sleeping), runs its part of the job.
fn work(s: &Shared, part: usize) {
    let mut seen = 0u32;
    loop {
        let mut spins = 0u32;
        let mut wait = park::Patience::new();
        while s.epoch.load(Ordering::Acquire) == seen {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if wait.keep_checking(s, seen) {
                std::thread::yield_now();
                continue;
            }
            // Asleep until a job or the pool's end; `sleepers` is raised before the epoch is
            // checked again, and read by the submitter after its bump, so no wake-up is missed.
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            s.park.sleep(s, seen);
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            spins = 0;
            wait = park::Patience::new();
        }
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        seen = s.epoch.load(Ordering::Acquire);
        let at = s.job.load(Ordering::SeqCst);
        // SAFETY: stored before the epoch this worker observed, and the job it points to is
        // kept alive by the submitter until this worker lowers `remaining`.
        if let Some(job) = unsafe { at.as_ref().map(|j| &**j) } {
            if catch_unwind(AssertUnwindSafe(|| job(part))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        s.remaining.fetch_sub(1, Ordering::Release);
    }
}

/// How an idle worker sleeps and is woken: a condition variable natively; in wasm a futex wait
/// on the epoch itself (the caller, maybe a browser's main thread, only ever notifies).
#[cfg(not(target_arch = "wasm32"))]
mod park {
    use super::Shared;
    use std::sync::atomic::Ordering;
    use std::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// How long a worker keeps checking for a job before it sleeps: the gap between a token's
    /// matmuls is far shorter, the gap between requests far longer. While checking it yields,
    /// so a pool with more threads than cores does not starve the thread doing the work.
    const WAIT_BEFORE_SLEEP: Duration = Duration::from_millis(1);

    pub(super) struct Park {
        lock: Mutex<()>,
        wake: Condvar,
    }

    impl Park {
        pub(super) fn new() -> Park {
            Park {
                lock: Mutex::new(()),
                wake: Condvar::new(),
            }
        }

        /// Sleeps while the epoch is still `seen` (checked under the lock the waker takes).
        pub(super) fn sleep(&self, s: &Shared, seen: u32) {
            let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            while s.epoch.load(Ordering::SeqCst) == seen {
                g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        }

        pub(super) fn wake_all(&self, _s: &Shared) {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }

    pub(super) struct Patience(Option<Instant>);

    impl Patience {
        pub(super) fn new() -> Patience {
            Patience(None)
        }

        pub(super) fn keep_checking(&mut self, _s: &Shared, _seen: u32) -> bool {
            self.0.get_or_insert_with(Instant::now).elapsed() < WAIT_BEFORE_SLEEP
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod park {
    use super::Shared;
    use std::sync::atomic::Ordering;

    /// Checks of the epoch before a worker starts waiting (wasm32-unknown-unknown has no clock
    /// in std): some tens of microseconds.
    const BUSY_CHECKS: u32 = 1 << 16;
    /// Short waits before a worker sleeps: about a millisecond in all, as natively.
    const WAITS_BEFORE_SLEEP: u32 = 50;
    /// One short wait, in nanoseconds.
    const YIELD_NS: i64 = 20_000;

    pub(super) struct Park;

    impl Park {
        pub(super) fn new() -> Park {
            Park
        }

        /// Sleeps while the epoch is still `seen`: the futex compares it atomically with going
        /// to sleep, so a bump in between returns at once.
        pub(super) fn sleep(&self, s: &Shared, seen: u32) {
            while s.epoch.load(Ordering::SeqCst) == seen {
                // SAFETY: the pointer is the epoch's, aligned and alive for the pool's life.
                unsafe {
                    core::arch::wasm32::memory_atomic_wait32(
                        s.epoch.as_ptr().cast::<i32>(),
                        seen as i32,
                        -1,
                    );
                }
            }
        }

        pub(super) fn wake_all(&self, s: &Shared) {
            // SAFETY: as in `sleep`; notifying never blocks (allowed on a browser's main thread).
            unsafe {
                core::arch::wasm32::memory_atomic_notify(s.epoch.as_ptr().cast::<i32>(), u32::MAX);
            }
        }
    }

    pub(super) struct Patience(u32);

    impl Patience {
        pub(super) fn new() -> Patience {
            Patience(0)
        }

        /// Busy checks first (the next job of a token is microseconds away); then, as wasm has
        /// no `yield`, short timed futex waits give the core away, so a pool with more threads
        /// than cores does not starve the thread doing the work.
        pub(super) fn keep_checking(&mut self, s: &Shared, seen: u32) -> bool {
            self.0 += 1;
            if self.0 < BUSY_CHECKS {
                return true;
            }
            // SAFETY: as in `Park::sleep`.
            unsafe {
                core::arch::wasm32::memory_atomic_wait32(
                    s.epoch.as_ptr().cast::<i32>(),
                    seen as i32,
                    YIELD_NS,
                );
            }
            self.0 < BUSY_CHECKS + WAITS_BEFORE_SLEEP
        }
    }
}
