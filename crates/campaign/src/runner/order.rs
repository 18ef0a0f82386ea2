//! The order runs are made in: grouped by link settings, repetitions in
//! rounds, optionally shuffled with the campaign's seed.

use crate::campaign::{Campaign, Order, Scenario};
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// One planned run.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    /// The scenario to run.
    pub scenario: Scenario,
    /// Its repetition number, from 0.
    pub repetition: u32,
}

/// The order runs are made in: scenarios grouped by link settings (so the
/// test-bed is rebuilt only when a link setting changes), and within a
/// group repetition rounds (every scenario once, then again), so slow drift
/// of the machine spreads over all scenarios instead of biasing one.
/// `shuffled` permutes the groups and each round with the campaign's seed.
pub fn plan(c: &Campaign) -> Vec<PlannedRun> {
    let scenarios = c.expand();
    let mut groups: Vec<Vec<Scenario>> = Vec::new();
    for s in scenarios {
        match groups.iter_mut().find(|g| g[0].link_key() == s.link_key()) {
            Some(g) => g.push(s),
            None => groups.push(vec![s]),
        }
    }
    let mut rng = match c.order {
        Order::Shuffled { seed } => Some(rand_chacha::ChaCha8Rng::seed_from_u64(seed)),
        Order::Sequential => None,
    };
    if let Some(r) = rng.as_mut() {
        groups.shuffle(r);
    }
    let mut out = Vec::new();
    for g in &groups {
        for rep in 0..c.repetitions {
            let mut round: Vec<&Scenario> = g.iter().collect();
            if let Some(r) = rng.as_mut() {
                round.shuffle(r);
            }
            out.extend(round.into_iter().map(|s| PlannedRun {
                scenario: s.clone(),
                repetition: rep,
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::Campaign;
    use std::collections::HashSet;

    const FILE: &str = r#"
repetitions = 2
[testbed]
preset = "router"
[matrix]
ip = [4, 6]
payload = [100, 200]
mtu = [1500, 9000]
"#;

    fn order(text: &str) -> Vec<(String, u32)> {
        let c = Campaign::parse(text, "t.toml").unwrap();
        plan(&c)
            .into_iter()
            .map(|p| (p.scenario.key, p.repetition))
            .collect()
    }

    #[test]
    fn runs_grouped_by_link_settings_in_rounds() {
        let o = order(FILE);
        assert_eq!(o.len(), 16);
        // All MTU 1500 runs first (one build), then all MTU 9000 runs.
        assert!(o[..8].iter().all(|(k, _)| k.ends_with("mtu=1500")));
        assert!(o[8..].iter().all(|(k, _)| k.ends_with("mtu=9000")));
        // Within a group: every scenario once (round 0), then again (round 1).
        assert!(o[..4].iter().all(|(_, r)| *r == 0));
        assert!(o[4..8].iter().all(|(_, r)| *r == 1));
        let unique: HashSet<_> = o.iter().collect();
        assert_eq!(unique.len(), 16);
    }

    #[test]
    fn shuffled_is_a_seeded_permutation_that_keeps_groups() {
        let shuffled = format!("order = \"shuffled\"\nseed = 7\n{FILE}");
        let a = order(&shuffled);
        assert_eq!(a, order(&shuffled), "same seed, same order");
        let other = order(&shuffled.replace("seed = 7", "seed = 8"));
        let seq = order(FILE);
        assert_ne!(a, seq);
        assert_ne!(a, other);
        let mut sa = a.clone();
        let mut ss = seq.clone();
        sa.sort();
        ss.sort();
        assert_eq!(sa, ss, "a permutation of the same runs");
        let mtu_of = |k: &str| k.rsplit('=').next().unwrap().to_string();
        assert!(
            a[..8].iter().all(|(k, _)| mtu_of(k) == mtu_of(&a[0].0)),
            "groups stay together"
        );
    }
}
