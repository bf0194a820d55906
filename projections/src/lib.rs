//! Read models of vigil.
