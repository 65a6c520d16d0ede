//! The CPU reference backend (being written).
