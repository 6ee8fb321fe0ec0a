//! A classic-BPF interpreter for seccomp programs.
//! (helper: to be written)
