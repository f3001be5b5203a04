//! Milliseconds for per-token timings. `std::time::Instant` panics on wasm32-unknown-unknown, so
//! there the clock is the JS host's `performance.now()` (or `Date.now()` where absent).

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub fn now_ms() -> f64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1000.0
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub fn now_ms() -> f64 {
    use wasm_bindgen::JsCast;
    let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into())
        .ok()
        .and_then(|p| p.dyn_into::<js_sys::Object>().ok());
    if let Some(perf) = perf {
        if let Ok(now) = js_sys::Reflect::get(&perf, &"now".into()) {
            if let Ok(f) = now.dyn_into::<js_sys::Function>() {
                if let Some(ms) = f.call0(&perf).ok().and_then(|v| v.as_f64()) {
                    return ms;
                }
            }
        }
    }
    js_sys::Date::now()
}

/// Milliseconds since the Unix epoch (`Date.now()` in wasm): when a prefill window expires, a
/// time a caller elsewhere (an HTTP client) can read.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub fn epoch_ms() -> f64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub fn epoch_ms() -> f64 {
    js_sys::Date::now()
}

/// A future that is ready `ms` milliseconds after its first poll: read timeouts and the backoff
/// between attempts. Natively a helper thread wakes it (the host runs on any executor, none
/// with a timer); in wasm a `setTimeout`, cleared when the delay is dropped early.
pub fn sleep(ms: u64) -> Delay {
    Delay { ms, timer: None }
}

pub struct Delay {
    ms: u64,
    timer: Option<timer::Timer>,
}

impl std::future::Future for Delay {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let ms = self.ms;
        // Armed at the first poll, so a delay that is never awaited costs nothing.
        self.timer
            .get_or_insert_with(|| timer::Timer::start(ms))
            .poll(cx)
    }
}

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
mod timer {
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    #[derive(Default)]
    struct Shared {
        done: bool,
        waker: Option<Waker>,
    }

    pub struct Timer(Arc<Mutex<Shared>>);

    impl Timer {
        pub fn start(ms: u64) -> Timer {
            let shared = Arc::new(Mutex::new(Shared::default()));
            let theirs = shared.clone();
            let spawned = std::thread::Builder::new().spawn(move || {
                std::thread::sleep(Duration::from_millis(ms));
                // A poisoned lock means the poller panicked; nobody is waiting any more.
                if let Ok(mut s) = theirs.lock() {
                    s.done = true;
                    if let Some(w) = s.waker.take() {
                        w.wake();
                    }
                }
            });
            // Without threads (wasm32-wasip1, where sources answer at once and no timeout is ever
            // armed) the delay is over at once rather than a panic.
            if spawned.is_err() {
                if let Ok(mut s) = shared.lock() {
                    s.done = true;
                }
            }
            Timer(shared)
        }

        pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
            let Ok(mut s) = self.0.lock() else {
                return Poll::Ready(());
            };
            if s.done {
                return Poll::Ready(());
            }
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod timer {
    use js_sys::{Function, Promise, Reflect};
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    pub struct Timer {
        fired: JsFuture,
        /// `clearTimeout`'s handle and the promise's resolve: dropping the timer early clears
        /// the timeout (an armed timer would keep Node's event loop alive) and settles the
        /// promise, which frees the callbacks `JsFuture` registered on it.
        early: Option<(JsValue, Function)>,
    }

    fn global_fn(name: &str) -> Option<Function> {
        Reflect::get(&js_sys::global(), &name.into())
            .ok()?
            .dyn_into::<Function>()
            .ok()
    }

    impl Timer {
        pub fn start(ms: u64) -> Timer {
            let mut early = None;
            let promise = Promise::new(&mut |resolve: Function, _reject| {
                // Without setTimeout (no JS host does that) the delay is over at once.
                let handle = global_fn("setTimeout")
                    .and_then(|set| {
                        set.call2(&js_sys::global(), &resolve, &JsValue::from_f64(ms as f64))
                            .ok()
                    })
                    .unwrap_or_else(|| {
                        let _ = resolve.call0(&JsValue::NULL);
                        JsValue::UNDEFINED
                    });
                early = Some((handle, resolve));
            });
            Timer {
                fired: JsFuture::from(promise),
                early,
            }
        }

        pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
            match Pin::new(&mut self.fired).poll(cx) {
                Poll::Ready(_) => {
                    self.early = None;
                    Poll::Ready(())
                }
                Poll::Pending => Poll::Pending,
            }
        }
    }

    impl Drop for Timer {
        fn drop(&mut self) {
            if let Some((handle, resolve)) = self.early.take() {
                if let Some(clear) = global_fn("clearTimeout") {
                    let _ = clear.call1(&js_sys::global(), &handle);
                }
                let _ = resolve.call0(&JsValue::NULL);
            }
        }
    }
}
