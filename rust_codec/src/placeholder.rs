//! TEMPORARY stub
