//! Compile a [`FilterSpec`] with libseccomp without loading it.
//! (helper: to be written)
