//! Layer reads into the host's own buffers (`ByteSource::read_into`): a streaming host recycles
//! the buffer of the layer it evicts for the next read, instead of allocating (and zeroing) a
//! span per read, and the tokens are those of a host that reads the plain way.

use engine::decode::GenerateOptions;
use futures::executor::block_on;
use host::{ByteSource, FileSource, Host, HostOptions, MemorySource, ReadFuture};
use knot::Knot;
use knot_suite::fixture;
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

fn tiny() -> PathBuf {
    fixture("tiny/llama-f32.knot")
}

/// A file source that records, for every `read_into`, the range and what the buffer it was
/// handed held before the read.
struct Recording {
    file: FileSource,
    handed: RefCell<Vec<(u64, u64, Vec<u8>)>>,
}

impl ByteSource for Recording {
    fn len(&self) -> Option<u64> {
        self.file.len()
    }
    fn read(&self, start: u64, end: u64) -> ReadFuture {
        self.file.read(start, end)
    }
    fn read_into(&self, start: u64, end: u64, buf: Vec<u8>) -> ReadFuture {
        self.handed.borrow_mut().push((start, end, buf.clone()));
        self.file.read_into(start, end, buf)
    }
    fn fills_buffers(&self) -> bool {
        true
    }
}

fn greedy(source: Rc<dyn ByteSource>, lru: usize, n: usize) -> Vec<u32> {
    let opts = HostOptions {
        lru_capacity: lru,
        ..HostOptions::default()
    };
    let mut host = block_on(Host::open(source, opts)).unwrap();
    let gen = GenerateOptions {
        max_tokens: n,
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    block_on(host.generate(&[7, 8, 9], &gen, &mut |_| true))
        .unwrap()
        .ids
}

#[test]
fn streamed_layers_are_read_into_the_buffers_of_evicted_ones() {
    let bytes = std::fs::read(tiny()).unwrap();
    let want = greedy(Rc::new(MemorySource::new(bytes.clone())), usize::MAX, 8);
    let source = Rc::new(Recording {
        file: FileSource::open(&tiny()).unwrap(),
        handed: RefCell::new(Vec::new()),
    });
    // One layer cached of two: every token reads both layers again.
    assert_eq!(greedy(source.clone(), 1, 8), want);

    let knot = Knot::from_bytes(&bytes).unwrap();
    let layers: Vec<_> = (0..knot.n_layers())
        .map(|l| knot.layer_range(l).unwrap())
        .collect();
    let handed = source.handed.borrow();
    // Every layer read went through read_into (the header and resident reads are plain reads).
    assert!(handed.len() >= 2 * 8, "{} layer reads", handed.len());
    for (start, end, _) in handed.iter() {
        assert!(layers.iter().any(|r| (r.start, r.end) == (*start, *end)));
    }
    // Past the first few (the pool's stock, allocated zeroed), each read gets a buffer that
    // still holds an earlier layer's bytes: recycled, not allocated and zeroed.
    let layer_bytes: Vec<&[u8]> = layers
        .iter()
        .map(|r| &bytes[r.start as usize..r.end as usize])
        .collect();
    let recycled = handed[4..]
        .iter()
        .filter(|(_, _, before)| layer_bytes.iter().any(|l| l.starts_with(before)))
        .count();
    assert_eq!(recycled, handed.len() - 4);
}

/// A source that keeps the default `read_into`: the host hands it no buffer to fill.
struct PlainOnly(MemorySource, RefCell<usize>);

impl ByteSource for PlainOnly {
    fn len(&self) -> Option<u64> {
        self.0.len()
    }
    fn read(&self, start: u64, end: u64) -> ReadFuture {
        self.0.read(start, end)
    }
    fn read_into(&self, start: u64, end: u64, buf: Vec<u8>) -> ReadFuture {
        *self.1.borrow_mut() += buf.capacity();
        self.0.read(start, end)
    }
}

#[test]
fn a_source_that_cannot_fill_buffers_is_handed_none() {
    let bytes = std::fs::read(tiny()).unwrap();
    let want = greedy(Rc::new(MemorySource::new(bytes.clone())), usize::MAX, 8);
    let source = Rc::new(PlainOnly(MemorySource::new(bytes), RefCell::new(0)));
    assert_eq!(greedy(source.clone(), 1, 8), want);
    assert_eq!(*source.1.borrow(), 0, "no buffer was allocated for it");
}

#[test]
fn file_and_memory_sources_fill_the_buffer_they_are_given_and_check_the_range() {
    let bytes = std::fs::read(tiny()).unwrap();
    let file = FileSource::open(&tiny()).unwrap();
    let memory = MemorySource::new(bytes.clone());
    for source in [&file as &dyn ByteSource, &memory] {
        let buf = vec![0xAA; 100];
        let at = buf.as_ptr();
        let got = block_on(source.read_into(40, 140, buf)).unwrap();
        assert_eq!(got, &bytes[40..140]);
        assert_eq!(got.as_ptr(), at, "the buffer handed in is the one filled");
        let len = bytes.len() as u64;
        let err = block_on(source.read_into(len - 10, len + 10, vec![0; 20])).unwrap_err();
        assert!(!err.is_transient(), "{err}");
        assert!(err.to_string().contains("out of"), "{err}");
    }
}
