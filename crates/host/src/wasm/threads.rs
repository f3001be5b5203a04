//! Threads in the threaded wasm build (shared memory and atomics): JS starts the workers, each
//! joins the matmul pool here and runs its part of every job. The package's `threads.js` drives
//! this; in the one-thread build every call but `threadsBuild` and `threadsCount` refuses.
//!
//! Order: `threadsBegin(n)` on the calling thread → in each of `n - 1` workers (same module,
//! same memory) `threadsJoin(pool, part)`, then `threadsWork()`, which returns when the pool
//! ends → `threadsUse(pool)` once every worker has joined.

use super::errors::js_error;
use crate::error::ErrorCode;
use engine::quant::ThreadsError;
use wasm_bindgen::prelude::*;

fn refused(e: ThreadsError) -> JsValue {
    js_error(ErrorCode::InvalidOption, e)
}

/// Whether this build runs matmuls across threads (the threaded artifact).
#[wasm_bindgen(js_name = threadsBuild)]
pub fn threads_build() -> bool {
    cfg!(target_feature = "atomics")
}

/// The threads matmuls split across now.
#[wasm_bindgen(js_name = threadsCount)]
pub fn threads_count() -> u32 {
    engine::quant::threads() as u32
}

/// Sets the process's thread count: 1 ends the pool (its workers return from `threadsWork`);
/// any other count must be the pool's started from JS.
#[wasm_bindgen(js_name = threadsSet)]
pub fn threads_set(n: u32) -> Result<(), JsValue> {
    engine::quant::set_threads(n as usize).map_err(refused)
}

#[cfg(target_feature = "atomics")]
mod started {
    use super::*;
    use engine::quant::PoolWorker;
    use std::cell::RefCell;

    thread_local! {
        /// This worker's part, between `threadsJoin` and `threadsWork`.
        static MINE: RefCell<Option<PoolWorker>> = const { RefCell::new(None) };
    }

    /// A pool of `n` threads (2..=256) waiting for its workers; returns its id.
    #[wasm_bindgen(js_name = threadsBegin)]
    pub fn threads_begin(n: u32) -> Result<u32, JsValue> {
        engine::quant::begin_pool(n as usize).map_err(refused)
    }

    /// Takes part `part` (1..n) of pool `pool` for this thread (a worker, never the caller).
    #[wasm_bindgen(js_name = threadsJoin)]
    pub fn threads_join(pool: u32, part: u32) -> Result<(), JsValue> {
        let worker = engine::quant::join_pool(pool, part as usize).map_err(refused)?;
        MINE.with(|m| *m.borrow_mut() = Some(worker));
        Ok(())
    }

    /// Runs this worker's part of every job until its pool ends (blocks the worker).
    #[wasm_bindgen(js_name = threadsWork)]
    pub fn threads_work() -> Result<(), JsValue> {
        let worker = MINE.with(|m| m.borrow_mut().take()).ok_or_else(|| {
            js_error(
                ErrorCode::InvalidArgument,
                "threadsWork: this thread has not joined a pool (threadsJoin)",
            )
        })?;
        worker.work();
        Ok(())
    }

    /// Makes pool `pool` the process's once every worker has joined it.
    #[wasm_bindgen(js_name = threadsUse)]
    pub fn threads_use(pool: u32) -> Result<(), JsValue> {
        engine::quant::use_pool(pool).map_err(refused)
    }
}

#[cfg(not(target_feature = "atomics"))]
mod single {
    use super::*;

    fn no_threads(n: u32) -> JsValue {
        refused(ThreadsError::Unavailable(n as usize))
    }

    #[wasm_bindgen(js_name = threadsBegin)]
    pub fn threads_begin(n: u32) -> Result<u32, JsValue> {
        Err(no_threads(n))
    }

    #[wasm_bindgen(js_name = threadsJoin)]
    pub fn threads_join(_pool: u32, _part: u32) -> Result<(), JsValue> {
        Err(no_threads(2))
    }

    #[wasm_bindgen(js_name = threadsWork)]
    pub fn threads_work() -> Result<(), JsValue> {
        Err(no_threads(2))
    }

    #[wasm_bindgen(js_name = threadsUse)]
    pub fn threads_use(_pool: u32) -> Result<(), JsValue> {
        Err(no_threads(2))
    }
}
