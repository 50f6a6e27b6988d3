//! Without the `hw` feature the crate has no backend: `open` says so.

#![cfg(not(feature = "hw"))]

use rnic_hw::{HwDevice, HwError, HwOptions};
use verbs_core::Errno;

#[test]
fn open_without_the_feature_is_not_built() {
    let e = HwDevice::open(&HwOptions::default()).err();
    assert_eq!(e, Some(HwError::NotBuilt));
    let e = HwError::NotBuilt;
    assert_eq!(e.errno(), Errno::EOPNOTSUPP);
    assert!(e.to_string().contains("--features hw"), "{e}");
}
