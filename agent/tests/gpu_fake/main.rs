//! The GPU probes through the real dlopen/dlsym/FFI path against the fake
//! libraries built here with `cc` (tests/fake-nvml, tests/fake-cuda), in
//! this process, as one test binary: each module was its own, linking the
//! whole agent again for a second of tests.
//!
//! What belongs here: a test that needs the fake NVML or CUDA and nothing
//! else (no API server: that is `apiserver`, where the GPU tests with pods
//! live). As threads of one process, each scenario loads its own copy of a
//! fake (its own dlopen handle and state), and the fakes are built once, by
//! the one `fake_nvml_support` module declared here.
//! `cargo test -p nodeproof --test gpu_fake <module>` runs one part.

#[path = "../support/fake_nvml.rs"]
mod fake_nvml_support;

mod gpu_fake_cuda;
mod gpu_fake_nvml;
