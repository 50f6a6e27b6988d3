//! Configuration from the environment (`RNIC_ADDR`, `RNIC_DEVICE`, fault knobs).
