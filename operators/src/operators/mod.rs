//! Operators: `map`, `filter`, `delay`, `reduce`, `window`.

pub mod delay;
pub mod filter;
pub mod key_by;
pub mod map;
pub mod reduce;
pub mod window;
