//! What a reader allocates and what a writer leaves behind, for tests that bound them: the
//! largest single allocation made while a function runs ([`RecordingAllocator`],
//! [`largest_allocation`]) and the names left in a directory ([`dir_names`]).
//!
//! Takes a test binary that installs [`RecordingAllocator`] as its global allocator. Guarantees:
//! every allocation is forwarded unchanged to the system allocator; recording allocates nothing.

/// A global allocator that records the largest single allocation of each thread, for tests
/// that bound what a reader allocates for its input: install it in a test binary with
/// `#[global_allocator] static A: RecordingAllocator = RecordingAllocator;` and measure with
/// [`largest_allocation`].
pub struct RecordingAllocator;

thread_local! {
    static LARGEST: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn note_allocation(size: usize) {
    // `try_with`: the cell has no destructor, but the allocator may run during teardown.
    let _ = LARGEST.try_with(|c| c.set(c.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to the system allocator; recording a size
// allocates nothing.
unsafe impl std::alloc::GlobalAlloc for RecordingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        note_allocation(layout.size());
        std::alloc::System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        note_allocation(layout.size());
        std::alloc::System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        note_allocation(new_size);
        std::alloc::System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
}

/// Runs `f` and returns its result with the largest single allocation it made on this thread
/// (0 unless [`RecordingAllocator`] is the global allocator).
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|c| c.set(0));
    let out = f();
    (out, LARGEST.with(std::cell::Cell::get))
}

/// The names in `dir`, sorted: what a writer left behind (a refused write leaves nothing, an
/// atomic one no temporary file).
pub fn dir_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}
