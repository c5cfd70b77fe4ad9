//! Fault verbs (being written).
