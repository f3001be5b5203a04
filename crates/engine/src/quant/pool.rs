//! A small pool of threads that run one job at a time, each thread its own part: what a matmul
//! needs hundreds of times per token. A decode step's matmuls take microseconds each, less than
//! waking a sleeping thread takes, so the workers keep checking for a while after each job
//! (spinning, then yielding) before they sleep, as llama.cpp's pool does; an idle pool sleeps and
//! costs nothing.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Busy-waits before yielding the core between checks (a job usually comes within these).
const SPINS: u32 = 256;
/// How long a worker keeps checking for a job before it sleeps: the gap between a token's
/// matmuls is far shorter, the gap between requests far longer. While checking it yields, so a
/// pool with more threads than cores does not starve the thread doing the work.
const WAIT_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_millis(1);

/// A job: called once with each part index `0..threads`.
type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Bumped for every job; a worker runs the job when it sees a new value.
    epoch: AtomicUsize,
    /// The job of the current epoch (valid from the bump until `remaining` reaches 0).
    job: UnsafeCell<Option<*const Job>>,
    /// Workers that have not finished the current job.
    remaining: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread holding `Pool::submit`, before the epoch bump that
// publishes it (Release) and read by workers after they observe that bump (Acquire); it is not
// written again until every worker has finished with it (`remaining` back to 0).
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

pub(super) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// One job at a time: a caller finding the pool busy runs its work on its own thread.
    submit: Mutex<()>,
}

impl Pool {
    /// A pool of `threads` parts: the calling thread and `threads - 1` workers.
    pub(super) fn new(threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: UnsafeCell::new(None),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(threads.saturating_sub(1));
        for part in 1..threads.max(1) {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("knot-matmul-{part}"))
                .spawn(move || work(&s, part));
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    // Those started stop with the pool.
                    drop(Pool {
                        shared,
                        workers,
                        submit: Mutex::new(()),
                    });
                    return Err(e);
                }
            }
        }
        Ok(Pool {
            shared,
            workers,
            submit: Mutex::new(()),
        })
    }

    /// Parts a job is cut into.
    pub(super) fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(i)` for every part `i` at once, part 0 on the calling thread, and returns when
    /// all are done. When another job holds the pool, every part runs here, in order.
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
        // SAFETY: no worker reads `job` now: the last job's `remaining` reached 0 (Shared).
        unsafe { *s.job.get() = Some(erased) };
        s.remaining.store(self.workers.len(), Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
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
        {
            let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// A worker: waits for each new epoch (spinning, then sleeping), runs its part of the job.
fn work(s: &Shared, part: usize) {
    let mut seen = 0usize;
    loop {
        let mut spins = 0u32;
        let mut since: Option<std::time::Instant> = None;
        loop {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            if s.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let t0 = *since.get_or_insert_with(std::time::Instant::now);
            if t0.elapsed() < WAIT_BEFORE_SLEEP {
                std::thread::yield_now();
                continue;
            }
            // Asleep until a job or the pool's end; the epoch is checked under the lock the
            // submitter takes to wake, so no wake-up is missed.
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            let mut g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            while s.epoch.load(Ordering::SeqCst) == seen && !s.stop.load(Ordering::SeqCst) {
                g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            drop(g);
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            spins = 0;
            since = None;
        }
        seen = s.epoch.load(Ordering::Acquire);
        // SAFETY: published before the epoch this worker observed (Acquire), and kept until
        // this worker lowers `remaining`.
        let job = unsafe { (*s.job.get()).map(|j| &*j) };
        if let Some(job) = job {
            if catch_unwind(AssertUnwindSafe(|| job(part))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        s.remaining.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_part_runs_once_per_job() {
        let pool = Pool::new(4).unwrap();
        assert_eq!(pool.threads(), 4);
        let hits: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        for _ in 0..1000 {
            pool.run(&|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
        }
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 1000);
        }
    }

    #[test]
    fn sleeping_workers_wake_and_a_busy_pool_runs_work_in_place() {
        let pool = Arc::new(Pool::new(2).unwrap());
        // Long enough for the worker to stop spinning and sleep.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let sum = AtomicU64::new(0);
        pool.run(&|i| {
            sum.fetch_add(i as u64 + 1, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 3);
        // Callers on several threads at once: each job still runs every part exactly once.
        let total = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (pool, total) = (pool.clone(), total.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        pool.run(&|_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(total.load(Ordering::Relaxed), 4 * 200 * 2);
    }

    #[test]
    fn a_panicking_part_reaches_the_caller_and_the_pool_serves_on() {
        let pool = Pool::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|i| assert!(i != 1, "part 1 fails"));
        }));
        assert!(r.is_err());
        let n = AtomicU64::new(0);
        pool.run(&|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }
}
