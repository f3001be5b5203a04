//! Buffers that grow to exactly what they are asked for, and the check that a size can be
//! allocated at all. A session's memory is then what its largest batch needs and no more (a
//! `Vec` left to itself doubles), and a size from a file or a request fails as an error
//! before anything is allocated.
//!
//! A leaf: the model, the KV cache and the kernels use it; it uses nothing of the crate.

/// Capacity for `len` elements in all, growing the allocation to exactly that when it must
/// grow; the length is unchanged.
pub(crate) fn reserve_exactly<T>(buf: &mut Vec<T>, len: usize) {
    buf.reserve_exact(len.saturating_sub(buf.len()));
}

/// Resizes a buffer to `len`, growing its allocation to exactly that (not the doubling a `Vec`
/// does).
pub(crate) fn fit<T: Copy + Default>(buf: &mut Vec<T>, len: usize) {
    reserve_exactly(buf, len);
    buf.resize(len, T::default());
}

/// A buffer that cannot exist on this platform: `what` would need `bytes` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge {
    pub what: &'static str,
    pub bytes: u128,
}

/// Checks that a buffer of `factors`' product bytes can exist here (at most `isize::MAX`
/// bytes: 2 GiB on wasm32), so sizes from the file and the request cannot wrap or abort.
pub(crate) fn addressable(what: &'static str, factors: &[usize]) -> Result<(), TooLarge> {
    let fits = factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .filter(|&b| b <= isize::MAX as usize);
    match fits {
        Some(_) => Ok(()),
        None => Err(TooLarge {
            what,
            bytes: factors
                .iter()
                .fold(1u128, |acc, &f| acc.saturating_mul(f as u128)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_grows_to_exactly_the_length_and_keeps_capacity_when_shrinking() {
        let mut buf: Vec<f32> = Vec::new();
        fit(&mut buf, 100);
        assert_eq!((buf.len(), buf.capacity()), (100, 100));
        fit(&mut buf, 10);
        assert_eq!((buf.len(), buf.capacity()), (10, 100));
        fit(&mut buf, 101);
        assert_eq!((buf.len(), buf.capacity()), (101, 101));
    }

    #[test]
    fn reserve_exactly_leaves_the_length() {
        let mut buf = vec![1u8; 3];
        reserve_exactly(&mut buf, 40);
        assert_eq!((buf.len(), buf.capacity()), (3, 40));
        reserve_exactly(&mut buf, 2);
        assert_eq!(buf.capacity(), 40);
    }

    #[test]
    fn sizes_past_isize_max_are_too_large() {
        assert_eq!(addressable("x", &[4, 1 << 20]), Ok(()));
        assert_eq!(addressable("x", &[]), Ok(()));
        let half = usize::MAX / 2 + 1;
        assert_eq!(
            addressable("the batch", &[half, 2]),
            Err(TooLarge {
                what: "the batch",
                bytes: half as u128 * 2
            })
        );
        // Exactly isize::MAX fits; one more does not.
        assert!(addressable("x", &[isize::MAX as usize]).is_ok());
        assert!(addressable("x", &[isize::MAX as usize + 1]).is_err());
    }
}
