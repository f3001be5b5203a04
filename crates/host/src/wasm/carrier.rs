//! The JS boundary of the `carrier` crate: `CarrierMediumPipeline` and `ImageCarrierPipeline` as
//! the seed's examples use them (the package re-exports these classes under those names).
//! Inputs are read field by field, so a bad value is reported with its name (and the cell id)
//! instead of as a generic deserialization error; large images cross as typed arrays.

use super::convert::to_js;
use super::errors::invalid_argument;
use carrier::{
    CarrierError, CarrierMediumPipeline, Cell, ImageCarrierPipeline, ImageData, ImageInput,
    Reading, SampleRange,
};
use js_sys::{Array, Object, Reflect, Uint32Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Every failure of a carrier pipeline is about its input.
fn error(msg: impl std::fmt::Display) -> JsValue {
    invalid_argument(msg)
}

fn carrier_error(e: CarrierError) -> JsValue {
    error(e)
}

fn field(obj: &JsValue, key: &str) -> Result<JsValue, JsValue> {
    if !obj.is_object() {
        return Err(error("options must be an object"));
    }
    Reflect::get(obj, &key.into())
}

/// A positive integer that fits u32, named in the error.
fn bandwidth(v: &JsValue, name: &str) -> Result<u32, JsValue> {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f >= 1.0 && f <= u32::MAX as f64 => Ok(f as u32),
        _ => Err(error(format!(
            "{name} must be an integer >= 1, got {}",
            describe(v)
        ))),
    }
}

fn describe(v: &JsValue) -> String {
    if v.is_undefined() {
        "undefined".into()
    } else if let Some(s) = v.as_string() {
        format!("{s:?}")
    } else {
        js_sys::JSON::stringify(v)
            .ok()
            .and_then(|s| s.as_string())
            .unwrap_or_else(|| format!("{v:?}"))
    }
}

fn bandwidths(v: &JsValue, name: &str) -> Result<Vec<u32>, JsValue> {
    let array = v
        .dyn_ref::<Array>()
        .ok_or_else(|| error(format!("{name} must be an array of integers >= 1")))?;
    if array.length() == 0 {
        return Err(error(format!("{name} must not be empty")));
    }
    array
        .iter()
        .enumerate()
        .map(|(i, b)| bandwidth(&b, &format!("{name}[{i}]")))
        .collect()
}

#[wasm_bindgen(js_name = CarrierMediumPipeline)]
pub struct WasmCarrierMedium {
    inner: CarrierMediumPipeline,
}

#[wasm_bindgen(js_class = CarrierMediumPipeline)]
impl WasmCarrierMedium {
    /// `{ sourceBandwidth, observerBandwidths }`.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<WasmCarrierMedium, JsValue> {
        let s = bandwidth(&field(&options, "sourceBandwidth")?, "sourceBandwidth")?;
        let observers = bandwidths(
            &field(&options, "observerBandwidths")?,
            "observerBandwidths",
        )?;
        let inner = CarrierMediumPipeline::new(s, observers).map_err(carrier_error)?;
        Ok(WasmCarrierMedium { inner })
    }

    /// `{ cells: [{ id, unitValue }] }` → `{ cells: [{ id, unitValue, sourcePosition, readings }] }`.
    pub fn analyze(&self, input: JsValue) -> Result<JsValue, JsValue> {
        let cells = field(&input, "cells")?;
        let cells = cells
            .dyn_ref::<Array>()
            .ok_or_else(|| error("input.cells must be an array of { id, unitValue }"))?;
        let mut list = Vec::with_capacity(cells.length() as usize);
        for (i, c) in cells.iter().enumerate() {
            if !c.is_object() {
                return Err(error(format!(
                    "cells[{i}] must be an object {{ id, unitValue }}"
                )));
            }
            let id = Reflect::get(&c, &"id".into())?
                .as_string()
                .ok_or_else(|| error(format!("cells[{i}].id must be a string")))?;
            let value = Reflect::get(&c, &"unitValue".into())?
                .as_f64()
                .ok_or_else(|| error(format!("cells[{i}] ({id:?}): unitValue must be a number")))?;
            // NaN, infinities and values outside [0, 1] are rejected by the crate, naming the id.
            list.push(Cell::new(id, value));
        }
        to_js(&self.inner.analyze(&list).map_err(carrier_error)?)
    }

    /// The source values compatible with a reading (what a deblur sampler asks for).
    #[wasm_bindgen(js_name = fiberStates)]
    pub fn fiber_states(&self, reading: JsValue) -> Result<JsValue, JsValue> {
        let json = js_sys::JSON::stringify(&reading)?
            .as_string()
            .unwrap_or_default();
        let reading: Reading =
            serde_json::from_str(&json).map_err(|e| error(format!("not a reading: {e}")))?;
        to_js(&self.inner.fiber_states(&reading).map_err(carrier_error)?)
    }
}

#[wasm_bindgen(js_name = ImageCarrierPipeline)]
pub struct WasmImageCarrier {
    inner: ImageCarrierPipeline,
}

/// Reads `{ width, height, channels, sampleRange, data }` and hands a borrowed view to `f`.
fn with_image<T>(
    input: &JsValue,
    f: impl FnOnce(&ImageInput) -> Result<T, CarrierError>,
) -> Result<T, JsValue> {
    let dim = |k: &str| -> Result<u32, JsValue> { bandwidth(&field(input, k)?, k) };
    let (width, height, channels) = (dim("width")?, dim("height")?, dim("channels")?);
    let range = field(input, "sampleRange")?;
    let sample_range = if let Some(name) = range.as_string() {
        SampleRange::parse(&name).map_err(carrier_error)?
    } else if let Some(pair) = range.dyn_ref::<Array>().filter(|a| a.length() == 2) {
        let (lo, hi) = (pair.get(0).as_f64(), pair.get(1).as_f64());
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Err(error("sampleRange [lo, hi] must hold two numbers"));
        };
        let r = SampleRange::Range { lo, hi };
        r.bounds().map_err(carrier_error)?;
        r
    } else {
        return Err(error(format!(
            "sampleRange must be 'unit', 'byte' or [lo, hi], got {}",
            describe(&range)
        )));
    };
    let data = field(input, "data")?;
    // Copied into wasm memory once; the typed array itself cannot be borrowed from Rust.
    let (floats, bytes): (Vec<f32>, Vec<u8>) =
        if let Some(a) = data.dyn_ref::<js_sys::Float32Array>() {
            (a.to_vec(), Vec::new())
        } else if let Some(a) = data.dyn_ref::<Uint8Array>() {
            (Vec::new(), a.to_vec())
        } else if let Some(a) = data.dyn_ref::<js_sys::Uint8ClampedArray>() {
            (Vec::new(), a.to_vec())
        } else {
            return Err(error(
                "data must be a Float32Array, Uint8Array or Uint8ClampedArray",
            ));
        };
    let data = if data.is_instance_of::<js_sys::Float32Array>() {
        ImageData::F32(&floats)
    } else {
        ImageData::U8(&bytes)
    };
    let image = ImageInput {
        width,
        height,
        channels,
        sample_range,
        data,
    };
    f(&image).map_err(carrier_error)
}

#[wasm_bindgen(js_class = ImageCarrierPipeline)]
impl WasmImageCarrier {
    /// `{ carrierBandwidth, observerBandwidths, patchSize }`.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<WasmImageCarrier, JsValue> {
        let s = bandwidth(&field(&options, "carrierBandwidth")?, "carrierBandwidth")?;
        let observers = bandwidths(
            &field(&options, "observerBandwidths")?,
            "observerBandwidths",
        )?;
        let patch = bandwidth(&field(&options, "patchSize")?, "patchSize")?;
        let inner = ImageCarrierPipeline::new(s, observers, patch).map_err(carrier_error)?;
        Ok(WasmImageCarrier { inner })
    }

    /// One object per (patch, channel) cell with its geometry and readings.
    pub fn analyze(&self, input: JsValue) -> Result<JsValue, JsValue> {
        let analysis = with_image(&input, |img| self.inner.analyze(img))?;
        to_js(&analysis)
    }

    /// Flat typed arrays instead of objects, for large images (see docs/carrier.md).
    #[wasm_bindgen(js_name = analyzeColumnar)]
    pub fn analyze_columnar(&self, input: JsValue) -> Result<JsValue, JsValue> {
        let c = with_image(&input, |img| self.inner.analyze_columnar(img))?;
        let out = Object::new();
        let set = |k: &str, v: &JsValue| Reflect::set(&out, &k.into(), v).map(|_| ());
        set("cellCount", &(c.cell_count as f64).into())?;
        set("carrierBandwidth", &c.carrier_bandwidth.into())?;
        set(
            "observerBandwidths",
            &Uint32Array::from(c.observer_bandwidths.as_slice()).into(),
        )?;
        set("grid", &to_js(&c.grid)?)?;
        set(
            "sourcePositions",
            &Uint32Array::from(c.source_positions.as_slice()).into(),
        )?;
        set(
            "observerPositions",
            &Uint32Array::from(c.observer_positions.as_slice()).into(),
        )?;
        set(
            "copyIndices",
            &Uint32Array::from(c.copy_indices.as_slice()).into(),
        )?;
        set("readings", &Uint8Array::from(c.readings.as_slice()).into())?;
        Ok(out.into())
    }
}
