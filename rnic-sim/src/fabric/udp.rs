//! Real UDP driver (in progress).
