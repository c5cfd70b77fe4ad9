//! Integration tests: an in-process server per test on `127.0.0.1:0`, driven through the
//! `toxiproxy_rust` 0.1.6 client (blocking, so from plain test threads) and plain HTTP.

mod binary;
mod common;
mod endpoints;
mod toxics;
