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
