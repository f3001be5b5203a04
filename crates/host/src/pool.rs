//! Layer buffers recycled between reads. A streamed layer that the cache evicts hands its buffer
//! back here, and the next layer read goes into it (through [`ByteSource::read_into`]), so
//! streaming decode allocates, zeroes and frees no span per read — and in wasm, memory stops
//! growing once the first pass has run, which is what lets JS write into it while a read is in
//! flight (see `JsSource::read_into`).
//!
//! [`ByteSource::read_into`]: crate::source::ByteSource::read_into

use std::cell::RefCell;
use std::ops::Deref;
use std::rc::{Rc, Weak};

/// Free buffers, at most `keep` of them (more would only hold memory nobody reads into: in a
/// steady stream each read takes one and each eviction gives one back).
pub struct BufferPool {
    free: RefCell<Vec<Vec<u8>>>,
    keep: usize,
}

impl BufferPool {
    pub fn new(keep: usize) -> Rc<Self> {
        Rc::new(BufferPool {
            free: RefCell::new(Vec::new()),
            keep,
        })
    }

    /// A buffer of exactly `len` bytes: a recycled one when one is big enough (truncated, so
    /// not zeroed — its old bytes are about to be overwritten), else a new one.
    pub fn take(&self, len: usize) -> Vec<u8> {
        let mut free = self.free.borrow_mut();
        match free.iter().position(|b| b.len() >= len) {
            Some(i) => {
                let mut buf = free.swap_remove(i);
                buf.truncate(len);
                buf
            }
            None => vec![0; len],
        }
    }

    /// Makes sure `count` free buffers of at least `len` bytes are ready, allocating what is
    /// missing now (before a pass starts its reads) rather than while reads are in flight.
    pub fn stock(&self, count: usize, len: usize) {
        let mut free = self.free.borrow_mut();
        let ready = free.iter().filter(|b| b.len() >= len).count();
        for _ in ready..count {
            free.push(vec![0; len]);
        }
    }

    fn give(&self, buf: Vec<u8>) {
        let mut free = self.free.borrow_mut();
        if free.len() < self.keep {
            free.push(buf);
        }
    }

    /// Bytes held by free buffers.
    pub fn free_bytes(&self) -> u64 {
        self.free.borrow().iter().map(|b| b.len() as u64).sum()
    }
}

/// A layer's bytes; the buffer goes back to its pool when dropped.
pub struct PooledBytes {
    bytes: Vec<u8>,
    pool: Weak<BufferPool>,
}

impl PooledBytes {
    pub fn new(bytes: Vec<u8>, pool: &Rc<BufferPool>) -> Self {
        PooledBytes {
            bytes,
            pool: Rc::downgrade(pool),
        }
    }

    /// Bytes freed when dropped (a source that cannot read into a given buffer).
    pub fn unpooled(bytes: Vec<u8>) -> Self {
        PooledBytes {
            bytes,
            pool: Weak::new(),
        }
    }
}

impl Deref for PooledBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for PooledBytes {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_buffer_is_reused_without_reallocating() {
        let pool = BufferPool::new(2);
        let first = PooledBytes::new(pool.take(100), &pool);
        let at = first.as_ptr();
        drop(first);
        assert_eq!(pool.free_bytes(), 100);
        let again = pool.take(80);
        assert_eq!(again.len(), 80);
        assert_eq!(again.as_ptr(), at);
        assert_eq!(pool.free_bytes(), 0);
    }

    #[test]
    fn too_small_buffers_are_passed_over_and_the_pool_is_bounded() {
        let pool = BufferPool::new(2);
        for len in [10, 20, 30] {
            drop(PooledBytes::new(pool.take(len), &pool));
        }
        // The third was not kept: two is the bound.
        assert_eq!(pool.free_bytes(), 10 + 20);
        // Nothing free is big enough: a new buffer, the free ones stay.
        assert_eq!(pool.take(25).len(), 25);
        assert_eq!(pool.free_bytes(), 10 + 20);
        // The 20-byte one serves a 15-byte read.
        assert_eq!(pool.take(15).len(), 15);
        assert_eq!(pool.free_bytes(), 10);
    }

    #[test]
    fn stocking_tops_up_to_the_count_of_big_enough_buffers() {
        let pool = BufferPool::new(1);
        drop(PooledBytes::new(pool.take(50), &pool));
        pool.stock(3, 40);
        assert_eq!(pool.free_bytes(), 50 + 40 + 40);
        pool.stock(2, 60);
        assert_eq!(pool.free_bytes(), 50 + 40 + 40 + 60 + 60);
        // Taking them all allocates nothing new: each take finds one.
        let taken: Vec<_> = (0..5).map(|_| pool.take(40)).collect();
        assert_eq!(pool.free_bytes(), 0);
        assert!(taken.iter().all(|b| b.len() == 40));
    }

    #[test]
    fn bytes_outliving_their_pool_are_simply_freed() {
        let pool = BufferPool::new(2);
        let bytes = PooledBytes::new(pool.take(8), &pool);
        drop(pool);
        assert_eq!(&*bytes, &[0; 8]);
    }
}
