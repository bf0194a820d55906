//! The provider clients against their fake servers: real HTTP on loopback.

mod cloud_b;
mod cloud_c;
mod cloud_d;
