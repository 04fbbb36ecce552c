//! Cue's rates: each active transfer's weight and the weighted
//! water-filling that turns weights and caps into paced rates (the
//! module docs of cue.rs say why it works this way).

use super::*;

impl Cue {
    /// Each transfer's weight: its class's over the class's active
    /// transfers.
    pub(super) fn reweight(&mut self) {
        let now = self.now;
        let idle = self.cfg.idle_after;
        let is_active = |t: &Transfer| now.saturating_sub(t.last_sent) <= idle;
        let mut per_class = vec![0u32; self.classes.len()];
        for t in self.transfers.values().filter(|t| is_active(t)) {
            per_class[t.class] += 1;
        }
        let weights: Vec<f64> = self.classes.iter().map(|c| c.weight).collect();
        self.max_weight = 0.0;
        self.active_count = per_class.iter().map(|&n| n as usize).sum();
        for t in self.transfers.values_mut() {
            t.weight = weights[t.class] / f64::from(per_class[t.class].max(1));
            if is_active(t) {
                self.max_weight = self.max_weight.max(t.weight);
            }
        }
    }

    /// A transfer's own cap: configured, or its fair pace, the lower.
    /// A transfer alone has no one to be fair to: no fair pace (paced at
    /// its measured rate it would only lose what a raise must win back).
    fn own_cap(&self, t: &Transfer) -> Option<u64> {
        let fair = self
            .fair
            .as_ref()
            .filter(|_| self.active_count > 1)
            .and_then(|f| f.pace(t.weight));
        match (t.cap, fair) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Weighted water-filling over the active transfers (module docs).
    pub(super) fn allocate(&mut self) {
        self.reweight();
        let now = self.now;
        let idle = self.cfg.idle_after;
        let is_active = |t: &Transfer| now.saturating_sub(t.last_sent) <= idle;
        let mut open: Vec<CueId> = self
            .transfers
            .iter()
            .filter(|(_, t)| is_active(t))
            .map(|(&id, _)| id)
            .collect();
        let mut rates: HashMap<CueId, Option<u64>> = HashMap::new();
        let mut used_total = 0.0_f64;
        let mut used_user: HashMap<String, f64> = HashMap::new();
        while !open.is_empty() {
            let w = |id: &CueId| self.transfers[id].weight;
            // The lowest fill level at which some constraint binds.
            let mut level = f64::INFINITY;
            for id in &open {
                if let Some(c) = self.own_cap(&self.transfers[id]) {
                    level = level.min(c as f64 / w(id));
                }
            }
            let mut user_w: HashMap<&str, f64> = HashMap::new();
            for id in &open {
                if let Some(u) = self.transfers[id].user.as_deref() {
                    if self.user_caps.contains_key(u) {
                        *user_w.entry(u).or_default() += w(id);
                    }
                }
            }
            let user_level = |u: &str, sw: f64| {
                let left = self.user_caps[u] as f64 - used_user.get(u).copied().unwrap_or(0.0);
                left.max(0.0) / sw
            };
            for (u, sw) in &user_w {
                level = level.min(user_level(u, *sw));
            }
            let server_level = self.cfg.server_cap.map(|c| {
                let sw: f64 = open.iter().map(w).sum();
                (c as f64 - used_total).max(0.0) / sw
            });
            if let Some(l) = server_level {
                level = level.min(l);
            }
            if !level.is_finite() {
                for id in open.drain(..) {
                    rates.insert(id, None);
                }
                break;
            }
            let tight = |l: f64| l <= level * (1.0 + EPS) + EPS;
            let server_binds = server_level.is_some_and(tight);
            let users_bind: Vec<&str> = user_w
                .iter()
                .filter(|(u, sw)| tight(user_level(u, **sw)))
                .map(|(u, _)| *u)
                .collect();
            let mut keep = Vec::new();
            for id in open.drain(..) {
                let t = &self.transfers[&id];
                let cap = self.own_cap(t);
                let own = cap.is_some_and(|c| tight(c as f64 / t.weight));
                let user = t.user.as_deref().is_some_and(|u| users_bind.contains(&u));
                if server_binds || own || user {
                    let r = match cap {
                        Some(c) if own => c as f64,
                        _ => t.weight * level,
                    };
                    used_total += r;
                    if let Some(u) = &t.user {
                        *used_user.entry(u.clone()).or_default() += r;
                    }
                    rates.insert(id, Some(r.max(1.0) as u64));
                } else {
                    keep.push(id);
                }
            }
            open = keep;
        }
        for (id, t) in self.transfers.iter_mut() {
            // Idle transfers keep their last rate: they are paced at it
            // when they come back, until the next allocation.
            let Some(r) = rates.get(id).copied() else {
                continue;
            };
            if t.rate != r {
                if t.rate.is_none() {
                    t.tokens = 0.0;
                    t.filled = now;
                }
                t.rate = r;
            }
            if t.paced != Some(t.rate) && !t.in_pace {
                t.in_pace = true;
                self.pace.push_back(*id);
            }
        }
    }
}
