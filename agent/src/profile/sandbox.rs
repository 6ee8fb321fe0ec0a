//! Run a command under a profile in a forked child (`nodeproof profile test`).
//! (helper: to be written)
