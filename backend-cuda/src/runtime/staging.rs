//! Host inputs on their way to device memory.
//!
//! A copy from page-locked memory runs at the link's speed (about 50 GB/s on the H100 machines)
//! and asynchronously; one from ordinary (pageable) memory runs at about 6 GB/s and blocks. So
//! bytes already page-locked are copied in place where the caller waits for the run (the
//! user's memory must outlive the copy); other bytes go through a page-locked staging buffer of
//! the executable, filled by all cores in chunks, each chunk's copy to the device running while
//! the next chunk is filled (one core fills host memory at about 5 GB/s there, all of them at
//! about 40).

use super::driver::{self, DriverResult, PinnedMemory, PrimaryContext, Stream};
use rayon::prelude::*;
use std::sync::Arc;

/// Bytes filled before their copy to the device is enqueued.
const CHUNK: usize = 4 << 20;

/// Below this, one core copies (threads would cost more than they save).
const PARALLEL_MIN: usize = 1 << 20;

/// Copies `src` into `dst` (the same length) with every core when it is large.
fn fill(dst: &mut [u8], src: &[u8]) {
    const PIECE: usize = 256 << 10;
    if src.len() < PARALLEL_MIN {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(PIECE)
            .zip(src.par_chunks(PIECE))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// Where an upload may read the host bytes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// In place when page-locked: the caller waits for the copy before the bytes may change.
    InPlace,
    /// Always through the staging buffer: the caller returns before the copy has run.
    Staged,
}

/// Enqueues on `stream` the copy of `src` to device address `dst` (see the module doc).
/// `staging` is this buffer's page-locked staging, grown as needed; the caller makes sure no
/// earlier copy still reads it.
pub fn upload(
    src: &[u8],
    dst: u64,
    staging: &mut Option<PinnedMemory>,
    context: &Arc<PrimaryContext>,
    source: Source,
    stream: &Stream,
) -> DriverResult<()> {
    if src.is_empty() {
        return Ok(());
    }
    if source == Source::InPlace && driver::is_pinned(src) {
        return driver::upload_async(dst, src, stream);
    }
    if staging.as_ref().is_none_or(|m| m.bytes < src.len()) {
        *staging = None;
        *staging = Some(PinnedMemory::alloc(context, src.len())?);
    }
    let staged = staging
        .as_mut()
        .map(PinnedMemory::as_mut_slice)
        .unwrap_or_default();
    for (i, chunk) in src.chunks(CHUNK).enumerate() {
        let at = i * CHUNK;
        let piece = &mut staged[at..at + chunk.len()];
        fill(piece, chunk);
        driver::upload_async(dst + at as u64, piece, stream)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn fill_copies_small_and_large_buffers_whole() {
        for len in [0, 7, (1 << 20) + 13] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut dst = vec![0u8; len];
            fill(&mut dst, &src);
            assert_eq!(dst, src);
        }
    }
}
