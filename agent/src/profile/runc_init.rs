//! The syscalls runc's init and a minimal entrypoint make after the filter is loaded.
//! (helper: to be written)
