//! Campaigns that grow: when the file of a campaign being resumed changed,
//! which finished runs still belong to it. Adding repetitions, axis values,
//! blocks or report settings keeps every finished run and plans only what
//! is new; changing anything a finished run was measured with (the target,
//! the run length, the seed, a value it used) is refused, naming it, since
//! old and new runs would then be averaged as if they were alike.

use super::{Campaign, RunLength, Scenario, Target};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Checks that every run in `finished` (scenario key, repetition from 0) of
/// the campaign as it was (`old`) is a run of the campaign as it is now
/// (`new`), with the same settings. Returns what grew, in words ("2 → 3
/// repetitions"), or why the finished runs cannot be kept.
pub fn check_growth(
    old: &Campaign,
    new: &Campaign,
    finished: &HashSet<(String, u32)>,
) -> Result<Vec<String>, String> {
    if old.rfc2544 != new.rfc2544 {
        return Err("the [rfc2544] search changed".into());
    }
    if let Some(what) = target_change(&old.target, &new.target) {
        return Err(what);
    }
    let same = |name: &str, a: String, b: String| {
        if a == b {
            Ok(())
        } else {
            Err(format!("`{name}` changed ({a} → {b})"))
        }
    };
    let length_key = match (old.length, new.length) {
        (RunLength::Duration { .. }, RunLength::Duration { .. }) => "duration_s",
        (RunLength::Packets { .. }, RunLength::Packets { .. }) => "packets",
        (RunLength::KBytes { .. }, RunLength::KBytes { .. }) => "kbytes",
        _ => "duration_s/packets/kbytes",
    };
    same(length_key, length(old.length), length(new.length))?;
    same(
        "warmup_s",
        old.warmup_s.to_string(),
        new.warmup_s.to_string(),
    )?;
    same("linger_s", opt(old.linger_s), opt(new.linger_s))?;
    same("interval_ms", opt(old.interval_ms), opt(new.interval_ms))?;
    same("seed", old.seed.to_string(), new.seed.to_string())?;

    let max_reps = new.repetitions_max();
    if let Some((key, rep)) = finished.iter().find(|(_, r)| *r >= max_reps) {
        return Err(format!(
            "`repetitions` lowered to {max_reps}, but {key} #{} is stored",
            rep + 1
        ));
    }
    let now: BTreeMap<String, Scenario> = new
        .expand()
        .into_iter()
        .map(|s| (s.key.clone(), s))
        .collect();
    let before: BTreeMap<String, Scenario> = old
        .expand()
        .into_iter()
        .map(|s| (s.key.clone(), s))
        .collect();
    let used: BTreeSet<&String> = finished.iter().map(|(k, _)| k).collect();
    for key in &used {
        match (before.get(*key), now.get(*key)) {
            (_, None) => return Err(gone(key, &now)),
            (Some(b), Some(n)) if b.settings != n.settings => {
                return Err(format!("the settings of scenario {key} changed"))
            }
            _ => {}
        }
    }
    let pairings: BTreeSet<&String> = used
        .iter()
        .filter_map(|k| now.get(*k).and_then(|s| s.settings.pairing.as_ref()))
        .collect();
    pairing_change(&old.target, &new.target, &pairings)?;
    let mut grew = Vec::new();
    if new.repetitions_text() != old.repetitions_text() {
        grew.push(format!(
            "repetitions {} → {}",
            old.repetitions_text(),
            new.repetitions_text()
        ));
    }
    let added = now.keys().filter(|k| !before.contains_key(*k)).count();
    if added > 0 {
        grew.push(format!("{added} new scenario(s)"));
    }
    Ok(grew)
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unset".into(), |v| v.to_string())
}

fn length(l: RunLength) -> String {
    match l {
        RunLength::Duration { seconds } => format!("duration_s = {seconds}"),
        RunLength::Packets { count } => format!("packets = {count}"),
        RunLength::KBytes { count } => format!("kbytes = {count}"),
    }
}

/// The first target setting that differs, named as the file writes it.
fn target_change(old: &Target, new: &Target) -> Option<String> {
    let fields = |t: &Target| -> Vec<(String, String)> {
        let f = |k: &str, v: String| (k.to_string(), v);
        match t {
            Target::Loopback => vec![f("[loopback]", String::new())],
            Target::Testbed(t) => vec![
                f("[testbed] preset", format!("{:?}", t.preset)),
                f("[testbed] file", format!("{:?}", t.file)),
                f("[testbed] sender", t.sender.clone()),
                f("[testbed] receiver", t.receiver.clone()),
                f("[testbed] mtu", format!("{:?}", t.mtu)),
                f("[testbed] link_rate", format!("{:?}", t.link_rate)),
                f("[testbed] offloads", format!("{:?}", t.offloads)),
                f("[testbed] forward_pps", format!("{:?}", t.forward_pps)),
                f("[testbed] name", t.name.clone()),
            ],
            Target::Hosts(h) => vec![
                f("[hosts] receiver", format!("{:?}", h.receiver)),
                f("[hosts] receiver6", format!("{:?}", h.receiver6)),
                f("[hosts] port", format!("{:?}", h.port)),
                f("[hosts] mtu", format!("{:?}", h.mtu)),
                f("[hosts] link_rate", format!("{:?}", h.link_rate)),
                // With pairings, nodes and pairings are compared per pairing
                // a finished run used (`pairing_change`): adding a pairing
                // and its nodes grows the campaign.
                f(
                    "[[hosts.node]]",
                    if h.pairings.is_empty() {
                        format!("{:?}", h.nodes)
                    } else {
                        "per pairing".into()
                    },
                ),
            ],
        }
    };
    let (a, b) = (fields(old), fields(new));
    if a.len() != b.len() || a.first().map(|x| &x.0[..3]) != b.first().map(|x| &x.0[..3]) {
        return Some(format!(
            "the target changed ({} → {})",
            old.describe(),
            new.describe()
        ));
    }
    a.into_iter()
        .zip(b)
        .find(|(x, y)| x != y)
        .map(|((k, x), (_, y))| format!("`{k}` changed ({x} → {y})"))
}

/// The first pairing used by finished runs whose definition, or one of
/// whose nodes, changed.
fn pairing_change(old: &Target, new: &Target, used: &BTreeSet<&String>) -> Result<(), String> {
    let (Target::Hosts(o), Target::Hosts(n)) = (old, new) else {
        return Ok(());
    };
    for p in used {
        let (Some(a), Some(b)) = (o.pairings.get(*p), n.pairings.get(*p)) else {
            return Err(format!(
                "[hosts.pairings] {p} was removed, but finished runs used it"
            ));
        };
        if a != b {
            return Err(format!(
                "[hosts.pairings] {p} changed ({a:?} → {b:?}), but finished runs used it"
            ));
        }
        let node =
            |t: &super::HostsTarget, name: &str| t.nodes.iter().find(|x| x.name == name).cloned();
        let names = a.senders.iter().chain(&a.routers).chain([&a.receiver]);
        if let Some(x) = names.into_iter().find(|x| node(o, x) != node(n, x)) {
            return Err(format!(
                "`[[hosts.node]]` {x} changed, but finished runs of pairing {p} used it"
            ));
        }
    }
    Ok(())
}

/// Why a finished run's scenario is no longer in the campaign: the first
/// `axis=value` of its key no scenario has any more, else its axes.
fn gone(key: &str, now: &BTreeMap<String, Scenario>) -> String {
    let pairs: BTreeSet<(&String, &String)> = now.values().flat_map(|s| s.axes.iter()).collect();
    for part in key.split(',') {
        if let Some((a, v)) = part.split_once('=') {
            if !pairs.iter().any(|(x, y)| *x == a && *y == v) {
                return format!(
                    "axis `{a}` no longer has the value {v}, which finished runs of {key} used"
                );
            }
        }
    }
    format!(
        "scenario {key} has finished runs but is no longer in the matrix (an axis was added to or dropped from its block)"
    )
}
