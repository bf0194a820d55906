//! Domain of vigil.
