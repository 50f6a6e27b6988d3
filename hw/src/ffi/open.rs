//! Opening a device: the device list, the choice of device, port and GID
//! ([`crate::HwDevice::open`]'s rules).

use super::context::Context;
use super::library::{lib, Lib};
use super::Verbs;
use crate::error::verbs_error;
use crate::select;
use crate::{HwError, HwOptions};
use std::ffi::CStr;
use std::ptr::NonNull;
use verbs_abi as abi;
use verbs_core::Gid;

/// `IBV_PORT_ACTIVE` of `enum ibv_port_state`.
const PORT_ACTIVE: u32 = abi::IBV_PORT_ACTIVE;

/// A device opened with everything [`crate::HwDevice`] needs to know about it.
pub(crate) struct Opened {
    /// The context, its completion channel and (still empty) object tables.
    pub(crate) verbs: Verbs,
    /// Device name.
    pub(crate) name: String,
    /// The ACTIVE port chosen.
    pub(crate) port: u8,
    /// The GID index chosen (fits in `u8`: `grh.sgid_index` is one byte).
    pub(crate) gid_index: u8,
    /// The GID at that index.
    pub(crate) gid: Gid,
    /// `ibv_query_device`'s answer, queried once (device limits do not change).
    pub(crate) device_attr: abi::ibv_device_attr,
}

/// The list `ibv_get_device_list` returned, freed when dropped (contexts opened from it stay
/// valid, man:ibv_get_device_list.3).
struct DeviceList {
    lib: &'static Lib,
    list: NonNull<*mut abi::ibv_device>,
    devices: Vec<(String, NonNull<abi::ibv_device>)>,
}

impl DeviceList {
    /// `ibv_get_device_list` of `lib`: NULL (`ENOSYS`: no kernel support, …) or an empty list
    /// is [`HwError::NoDevice`].
    fn get(lib: &'static Lib) -> Result<DeviceList, HwError> {
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a writable int; the list is freed in `Drop`.
        let list = unsafe { (lib.ibv_get_device_list)(&mut n) };
        let Some(list) = NonNull::new(list) else {
            return Err(HwError::NoDevice);
        };
        let mut devices = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` device pointers and a NULL terminator.
            let Some(dev) = NonNull::new(unsafe { *list.as_ptr().add(i) }) else {
                break;
            };
            // SAFETY: a device of the live list.
            let name = unsafe { (lib.ibv_get_device_name)(dev.as_ptr()) };
            let name = if name.is_null() {
                format!("#{i}")
            } else {
                // SAFETY: libibverbs returns the device's NUL-terminated name, which lives as
                // long as the list.
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned()
            };
            devices.push((name, dev));
        }
        Ok(DeviceList { lib, list, devices })
    }

    fn names(&self) -> Vec<String> {
        self.devices.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Opens entry `i`.
    fn open(&self, i: usize) -> Result<Context, HwError> {
        let Some((_, dev)) = self.devices.get(i) else {
            return Err(HwError::NoDevice);
        };
        // SAFETY: an entry of this list, which is not freed before `self` is dropped.
        Ok(unsafe { Context::open(self.lib, *dev) }?)
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list from `ibv_get_device_list`, freed once.
        unsafe { (self.lib.ibv_free_device_list)(self.list.as_ptr()) };
    }
}

/// The first ACTIVE port of `ctx` (or `want`, if it is ACTIVE), with its attributes.
fn active_port(
    ctx: &Context,
    attr: &abi::ibv_device_attr,
    want: Option<u8>,
) -> Result<Option<(u8, abi::ibv_port_attr)>, HwError> {
    if let Some(p) = want {
        if p == 0 || p > attr.phys_port_cnt {
            return Err(HwError::Verbs(verbs_core::Error::inval(format!(
                "port {p}: the device has ports 1..={}",
                attr.phys_port_cnt
            ))));
        }
        let a = ctx.query_port(p)?;
        return Ok((a.state == PORT_ACTIVE).then_some((p, a)));
    }
    for p in 1..=attr.phys_port_cnt {
        // A port that cannot be queried is not usable: try the next.
        if let Ok(a) = ctx.query_port(p) {
            if a.state == PORT_ACTIVE {
                return Ok(Some((p, a)));
            }
        }
    }
    Ok(None)
}

/// A device chosen with its attributes and port.
struct Chosen {
    ctx: Context,
    name: String,
    attr: abi::ibv_device_attr,
    port: u8,
    port_attr: abi::ibv_port_attr,
}

/// The device named in `opts`, or the first with an ACTIVE port.
fn choose(list: &DeviceList, opts: &HwOptions) -> Result<Chosen, HwError> {
    if list.devices.is_empty() {
        return Err(HwError::NoDevice);
    }
    let candidates: Vec<usize> = match &opts.device {
        Some(name) => {
            let Some(i) = list.devices.iter().position(|(n, _)| n == name) else {
                return Err(HwError::DeviceNotFound {
                    name: name.clone(),
                    available: list.names(),
                });
            };
            vec![i]
        }
        None => (0..list.devices.len()).collect(),
    };
    // With no name given, a device that cannot be opened or queried is skipped; its error is
    // the answer only when no device could be examined at all.
    let mut first_error = None;
    let mut examined = false;
    for &i in &candidates {
        let found = list.open(i).and_then(|ctx| {
            let attr = ctx.query_device()?;
            Ok(active_port(&ctx, &attr, opts.port)?.map(|(port, pa)| (ctx, attr, port, pa)))
        });
        match found {
            Ok(Some((ctx, attr, port, port_attr))) => {
                return Ok(Chosen {
                    ctx,
                    name: list.devices[i].0.clone(),
                    attr,
                    port,
                    port_attr,
                })
            }
            Ok(None) => examined = true,
            Err(e) if opts.device.is_some() => return Err(e),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let (false, Some(e)) = (examined, first_error) {
        return Err(e);
    }
    let device = candidates
        .iter()
        .filter_map(|&i| list.devices.get(i).map(|d| d.0.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    Err(HwError::NoActivePort { device })
}

/// The GID index to use on `c`'s port: `opts.gid_index`, or the first IPv4-mapped (or
/// `opts.ip`) RoCE v2 GID ([`select::pick_gid`]).
fn choose_gid(c: &Chosen, opts: &HwOptions) -> Result<(u8, Gid), HwError> {
    if let Some(i) = opts.gid_index {
        let len = u32::try_from(c.port_attr.gid_tbl_len).unwrap_or(0);
        if i >= len {
            return Err(HwError::Verbs(verbs_core::Error::inval(format!(
                "GID index {i}: port {} has {len} GIDs",
                c.port
            ))));
        }
        let gid = c.ctx.query_gid(c.port, i)?;
        let i = u8::try_from(i).map_err(|_| verbs_error("gid_index above 255", libc::EINVAL))?;
        return Ok((i, gid));
    }
    let len = u32::try_from(c.port_attr.gid_tbl_len).unwrap_or(0).min(256);
    let picked = select::pick_gid(
        len,
        opts.ip,
        |i| c.ctx.query_gid(c.port, i).ok(),
        |i| {
            select::kind_of(c.ctx.query_gid_type(c.port, i), || {
                std::fs::read_to_string(select::sysfs_type_path(&c.name, c.port, i)).ok()
            })
        },
    );
    match picked.and_then(|(i, g)| u8::try_from(i).ok().map(|i| (i, g))) {
        Some(p) => Ok(p),
        None => Err(HwError::NoRoceV2Gid {
            device: c.name.clone(),
            port: c.port,
            ip: opts.ip,
        }),
    }
}

/// Opens the device `opts` selects (see [`crate::HwDevice::open`]).
pub(crate) fn open(opts: &HwOptions) -> Result<Opened, HwError> {
    let list = DeviceList::get(lib()?)?;
    let chosen = choose(&list, opts)?;
    drop(list);
    let (gid_index, gid) = choose_gid(&chosen, opts)?;
    let verbs = Verbs::new(chosen.ctx)?;
    Ok(Opened {
        verbs,
        name: chosen.name,
        port: chosen.port,
        gid_index,
        gid,
        device_attr: chosen.attr,
    })
}
