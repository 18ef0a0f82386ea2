//! The sender (`wirebench send`): one call, [`run`], drives a whole
//! session in order — [`crate::session`] opens it (handshake, clock
//! offset), [`crate::pacing`] runs the flows on their absolute schedules,
//! [`crate::session`] collects the receiver's report, [`crate::rtt`] the
//! reflections, and [`crate::result`] assembles the document. This module
//! only sequences them and decides when a run is partial.

use crate::assemble::{assemble_doc, DocInputs};
use crate::clock::{mono_ns, realtime_ns};
use crate::live::Forward;
use crate::pacing::{pacer_sockets, source_port, Launch};
use crate::plan::{CheckedPlan, Hooks, SessionPlan};
use crate::reverse::Local;
use crate::session::{collect_report, Watcher};
use crate::sys::{self, CpuClock, CpuTime, HostCpu};
use crate::transport::{bind_data, Ident};
use crate::EngineError;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use wirebench_schema::result::{FlowReport, ReportExtra, ResultDoc};
use wirebench_stats::IpVersion;
use wirebench_wire::{ControlMsg, Direction};

pub use crate::pacing::LATE_LIMIT_NS;
pub use crate::session::OFFSET_SAMPLES;

/// Lead time between `Start` and the first scheduled packet, so that every
/// flow thread is up and waiting when the schedule begins.
pub(crate) const START_LEAD_NS: u64 = 20_000_000;
/// Extra lead per flow: a pacer sets up each of its flows (schedule,
/// accumulators) before the first departure; measured about 20 µs a flow
/// on a loaded 2-CPU host, so 1 000 flows get 70 ms, 10 000 flows 520 ms.
pub(crate) const START_LEAD_PER_FLOW_NS: u64 = 50_000;

/// Runs a whole session and returns its result document. When the run
/// breaks part-way (the receiver vanished), the error is
/// [`EngineError::Partial`] carrying the document with `partial: true`.
pub fn run(plan: SessionPlan) -> Result<ResultDoc, EngineError> {
    run_checked(plan.check()?, Hooks::default())
}

/// [`run`] for a plan already checked, with the program's handles
/// (Ctrl-C flag, live sink).
pub fn run_checked(plan: CheckedPlan, hooks: Hooks) -> Result<ResultDoc, EngineError> {
    // ICMP echo flows: no receiver, no session (crate::icmp).
    if crate::transport::icmp::is_icmp(&plan) {
        return crate::transport::icmp::run(&plan, &hooks);
    }
    // With several receivers: a place at the common start line, given up
    // (releasing the others) if this session fails before it.
    let mut arrival = crate::multi::Arrival::new(hooks.together.clone());
    // A socket per flow: thousands of flows pass the default 1024 files.
    if plan.flows.len() > 256 {
        crate::sys::raise_open_files_limit();
    }
    let addr = plan.resolve()?;
    // Data sockets are bound before `Hello`, which declares their source
    // ports: the receiver then takes each flow's data from that port only.
    // Reverse flows (the receiver sends them) get none: crate::reverse.
    let dst = crate::transport::rx::unmap(addr.ip());
    let bound = plan
        .flows
        .iter()
        .map(|f| {
            (f.direction != Direction::Reverse)
                .then(|| bind_data(f, dst))
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pacer_socks = pacer_sockets(&plan, dst)?;
    let rev_socks = crate::reverse::bind_local(&plan, dst)?;
    let src_ports: Vec<Option<u16>> = bound
        .iter()
        .zip(&rev_socks)
        .enumerate()
        .map(|(i, (b, r))| match (b, r) {
            (Some(b), _) => Some(source_port(&plan, i, b.port, &pacer_socks)),
            (None, Some(r)) => r.local_addr().ok().map(|a| a.port()),
            (None, None) => None,
        })
        .collect();
    let crate::session::Opened {
        ctl,
        src_ip,
        dst_ip,
        mtu,
        session,
        ports,
        clock,
        live,
        setups,
        probe_key,
        remote_log,
    } = crate::session::open(&plan, addr, &src_ports, hooks.live.is_some())?;
    let mut ctl = ctl;
    let ip = if dst_ip.is_ipv4() {
        IpVersion::V4
    } else {
        IpVersion::V6
    };

    // Data sockets, all connected before Start so the schedule is not
    // delayed.
    let mut socks = Vec::new();
    for (i, (f, b)) in plan.flows.iter().zip(bound).enumerate() {
        let Some(b) = b else {
            socks.push(None);
            continue;
        };
        let id = Ident {
            session,
            flow: (i + 1) as u16,
        };
        socks.push(Some(b.connect(f, ports[i], id)?));
    }
    let reverse = crate::reverse::any(&plan);
    let local = Local::open(
        &plan,
        &setups,
        dst_ip,
        ports.iter().copied().zip(rev_socks).collect(),
        session,
        (clock.applied_ns(), clock.error_ns),
        probe_key.clone(),
    )?;

    let forward = match (&hooks.live, live) {
        (sink, true) => Some(Arc::new(Forward::new(sink.clone(), plan.flows.len()))),
        (Some(sink), false) if plan.interval_ms.is_some() => {
            sink.0.unsupported();
            None
        }
        _ => None,
    };
    // TCP_INFO for the live lines is read from a clone of each TCP socket,
    // dropped with the watcher when the flows end.
    let watch_live = forward.as_ref().map(|f| {
        let tcp = socks
            .iter()
            .map(|s| {
                s.as_ref()
                    .and_then(|s| s.tcp_stream())
                    .and_then(|t| t.try_clone().ok())
            })
            .collect();
        (f.clone(), tcp)
    });

    // Go (with several receivers: all at once).
    arrival.arrive()?;
    ctl.send(&ControlMsg::Start)?;
    let started_real = realtime_ns();
    let t0 = mono_ns()
        + START_LEAD_NS
        + START_LEAD_PER_FLOW_NS * plan.flows.len() as u64
        + crate::pacing::tcp_writer_lead_ns(&plan);
    let cpu0 = CpuTime::process();
    let host0 = HostCpu::read();
    let snd0 = sys::udp_sndbuf_errors();
    let abort = Arc::new(AtomicBool::new(false));
    local.started();
    let watcher = Watcher::start(ctl, abort.clone(), watch_live)?;
    let launch = Launch {
        session,
        ip,
        mtu,
        t0,
        abort: abort.clone(),
        probe_key,
        pacer_socks,
        cancel: hooks.cancel,
    };
    #[cfg(target_os = "linux")]
    let mut xdp =
        crate::xdp::tx::choose(&plan, &socks, src_ip, dst_ip, ports.first().copied(), mtu);
    #[cfg(target_os = "linux")]
    let ran = crate::xdp::tx::run_flows(&plan, socks, launch, &mut xdp);
    #[cfg(not(target_os = "linux"))]
    let ran = crate::pacing::run_flows(&plan, socks, launch);
    let mut outcomes = match ran {
        Ok(o) => o,
        Err(e) => {
            let _ = watcher.finish();
            return Err(e);
        }
    };
    // Our flows are done; the receiver's (reverse) may still be sending.
    while reverse
        && !watcher.reverse_done()
        && !abort.load(std::sync::atomic::Ordering::Relaxed)
        && !hooks
            .cancel
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let linger_ms = plan.linger_ms;
    let stopped_mono = mono_ns();
    let run_s = (stopped_mono.saturating_sub(t0)) as f64 / 1e9;
    let cpu_sender = CpuTime::process().since(cpu0);
    let host1 = HostCpu::read();
    let sndbuf_errors = sys::udp_sndbuf_errors().saturating_sub(snd0);
    #[cfg(target_os = "linux")]
    let sndbuf_errors = sndbuf_errors + xdp.driver_drops();
    let (ctl, peer_gone) = watcher.finish();

    let mut partial: Option<String> = peer_gone;

    // Collect the receiver's side, also when a flow failed on its own (the
    // other flows' numbers are still good).
    let mut reports: Vec<FlowReport> = Vec::new();
    let mut extra = ReportExtra::default();
    if let (None, Some(mut ctl)) = (&partial, ctl) {
        let sent: Vec<u64> = outcomes.iter().map(|o| o.send.packets).collect();
        match collect_report(&mut ctl, plan.linger_ms, sent, forward.as_deref()) {
            Ok((r, x)) => {
                reports = r;
                extra = x;
                let _ = ctl.send(&ControlMsg::Bye);
            }
            Err(e) => partial = Some(e.to_string()),
        }
    }
    // Reflections: the receiver already lingered before its report; without
    // a report, give them the linger here.
    let wait_ms = if partial.is_some() { linger_ms } else { 0 };
    for o in &mut outcomes {
        if let Some(rx) = o.rtt_rx.take() {
            o.rtt = Some(rx.finish(wait_ms, &abort));
        }
    }
    if reverse {
        // The receiver's side of a reverse flow is what it sent; ours is
        // what arrived, in the place a receiver's report would be.
        if partial.is_some() {
            std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        }
        let mut sent = Vec::with_capacity(plan.flows.len());
        for (i, f) in plan.flows.iter().enumerate() {
            let by_daemon = (f.direction == Direction::Reverse)
                .then(|| {
                    reports
                        .iter_mut()
                        .find(|r| usize::from(r.flow_id) == i + 1)
                        .and_then(|r| r.sent.take())
                })
                .flatten();
            sent.push(by_daemon.as_ref().map(|s| s.packets));
            if f.direction == Direction::Reverse {
                outcomes[i] = crate::reverse::sent_by_daemon(by_daemon);
            }
        }
        for (i, r) in local.finish(&sent).into_iter().enumerate() {
            let Some(r) = r else { continue };
            match reports.iter_mut().find(|x| usize::from(x.flow_id) == i + 1) {
                Some(slot) => *slot = r,
                None => reports.push(r),
            }
        }
        if partial.is_some() {
            // Without the receiver's report nothing is known of what it sent.
            for (i, f) in plan.flows.iter().enumerate() {
                if f.direction == Direction::Reverse {
                    outcomes[i].error = None;
                }
            }
        }
    }
    if partial.is_none() {
        if let Some((i, e)) = outcomes
            .iter()
            .enumerate()
            .find_map(|(i, o)| o.error.as_ref().map(|e| (i, e)))
        {
            partial = Some(format!("flow {}: {e}", i + 1));
        }
    }
    if partial.is_none() && outcomes.iter().any(|o| o.cancelled) {
        partial = Some("interrupted: flows stopped early".into());
    }
    if partial.is_none() {
        partial = taken_over(&plan, &outcomes, &reports);
    }

    let mut doc = assemble_doc(DocInputs {
        plan: &plan,
        started_real,
        src: SocketAddr::new(src_ip, 0),
        dst_ip,
        mtu,
        clock,
        outcomes,
        reports,
        extra,
        run_s,
        cpu_sender,
        sndbuf_errors,
        host: sys::host_cpu_share(host0, host1, run_s),
        partial: partial.clone(),
    });
    if let Some(f) = &forward {
        f.fill_tcp(&mut doc.flows);
    }
    doc.receiver.log = remote_log;
    #[cfg(target_os = "linux")]
    if let Some(p) = xdp.send_path(&plan.xdp) {
        doc.host.send_path = p;
    }
    match partial {
        None => Ok(doc),
        Some(reason) => Err(EngineError::Partial {
            reason,
            doc: Box::new(doc),
        }),
    }
}

/// The first forward flow of which the receiver took (almost) nothing
/// while it counted datagrams on the flow's port from elsewhere: the
/// figures then describe whoever held the port, not the path (a NAT that
/// moved the declared source port, or a forged datagram at an older
/// receiver), so the run is not a measurement.
fn taken_over(
    plan: &SessionPlan,
    outcomes: &[crate::pacing::FlowSent],
    reports: &[FlowReport],
) -> Option<String> {
    plan.flows.iter().zip(outcomes).enumerate().find_map(|(i, (f, o))| {
        let r = reports.iter().find(|r| usize::from(r.flow_id) == i + 1)?;
        let (sent, got) = (o.send.packets, r.summary.counts.unique);
        let taken = f.direction != Direction::Reverse && r.foreign > 0 && sent > 0 && got * 100 <= sent;
        taken.then(|| {
            format!(
                "flow {}: the receiver took {got} of {sent} probes and counted {} foreign datagrams \
                 on the flow's port: something else held it (a NAT that changes source ports needs \
                 --key-file with --auth probes)",
                i + 1,
                r.foreign
            )
        })
    })
}
