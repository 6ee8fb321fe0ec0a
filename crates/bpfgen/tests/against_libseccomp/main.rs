//! The BPF compilers against libseccomp and the running kernel, and the
//! lint pipeline's decoding of bad input: one test binary (each of the four
//! was its own binary in the agent's tests, linking libseccomp and the
//! seccomp crate again), in the crate they test.

mod bpf_kernel_diff;
mod bpfgen_vs_libseccomp;
mod compile_libseccomp;
mod profile_decode;
mod profile_diff;
