//! The control task's actions: what each [`Action`] of the sans-I/O
//! session means here (a login checked off the loop, a passive listener,
//! a query or change on the served root, a transfer started as a task),
//! and its outcome fed back to the session.

use super::*;

/// The log target of the control task's lines, as before these actions
/// had a file of their own (operators' filters and log searches match
/// `sluice_server::ftp::session: login user=...`).
const LOG_TARGET: &str = "sluice_server::ftp::session";

impl Driver {
    /// Performs one action; false for Close.
    pub(super) async fn perform(&mut self, action: Action) -> bool {
        match action {
            Action::Authenticate { user, pass } => {
                let users = self.ctx.current.users();
                let name = user.clone();
                let pass = String::from_utf8_lossy(pass.as_bytes()).into_owned();
                let login = if users.check_is_costly(&name) {
                    // Argon2 costs tens of milliseconds and ~19 MiB: off the
                    // event loop, a bounded number at once; a login that
                    // cannot get a slot in time is refused like a wrong one.
                    let slots = users.check_slots();
                    match tokio::time::timeout(CHECK_SLOT_WAIT, slots.acquire_owned()).await {
                        Ok(Ok(slot)) => tokio::task::spawn_blocking(move || {
                            let _slot = slot;
                            users.check(&name, &pass)
                        })
                        .await
                        .ok()
                        .flatten(),
                        _ => {
                            tracing::warn!(target: LOG_TARGET, user = %user, "login refused: password checks busy");
                            None
                        }
                    }
                } else {
                    users.check(&name, &pass)
                };
                let login = match login.map(|l| (self.ctx.open_root(&l.root), l)) {
                    None => None,
                    Some((Ok(r), l)) => Some((l, r)),
                    Some((Err(e), _)) if sluice_platform::sys::is_out_of_descriptors(&e) => {
                        // Not the client's fault: "try later", not 530.
                        tracing::warn!(target: LOG_TARGET, error = %e, "login deferred: out of file descriptors");
                        self.session
                            .handle_unavailable("Out of resources, try again later.");
                        return true;
                    }
                    Some((Err(e), l)) => {
                        tracing::error!(target: LOG_TARGET, error = %e, root = %l.root.display(), "cannot open the login's root");
                        None
                    }
                };
                match login {
                    Some((l, root)) => {
                        tracing::info!(target: LOG_TARGET, user = %user, writable = l.writable, "login");
                        let grant = LoginGrant {
                            writable: l.writable,
                            allow_foreign_data_host: self.cfg.allow_foreign_data_host
                                && !l.anonymous,
                        };
                        self.login = Some((user, l, root));
                        self.session.handle_login(Some(grant));
                    }
                    None => {
                        tracing::info!(target: LOG_TARGET, user = %user, "login refused");
                        tokio::time::sleep(FAILED_LOGIN_DELAY).await;
                        self.session.handle_login(None);
                    }
                }
            }
            Action::OpenPassive { extended } => {
                self.passive = None;
                self.cached = None;
                // Only a login granted third-party transfers (never anonymous)
                // may have its passive port reached from another host.
                let foreign_ok = self.cfg.allow_foreign_data_host
                    && self.login.as_ref().is_some_and(|(_, l, _)| !l.anonymous);
                let peer = Some(self.peer.ip()).filter(|_| !foreign_ok);
                match Passive::open(
                    &self.ctx.engine,
                    self.session.socket_buffer(),
                    self.local.ip(),
                    self.cfg.pasv_ports,
                    peer,
                ) {
                    Ok(p) => {
                        let addr = p.local_addr().ok().map(|a| match self.cfg.pasv_address {
                            Some(ip) if !extended => SocketAddr::new(ip, a.port()),
                            _ => a,
                        });
                        self.passive = Some(p);
                        self.session.handle_passive(addr);
                    }
                    Err(e) => {
                        tracing::warn!(target: LOG_TARGET, error = %e, "cannot open passive listener");
                        self.session.handle_passive(None);
                    }
                }
            }
            Action::ClosePassive => {
                self.passive = None;
                self.cached = None;
            }
            Action::DropKept => self.cached = None,
            Action::Query { path, query } => {
                let r = self
                    .blocking(IoClass::Meta, move |root, w| {
                        ops::query(root, &path, query, w)
                    })
                    .await;
                self.session.handle_result(r);
            }
            Action::Change(c) => {
                let r = if self.login.as_ref().is_some_and(|(_, l, _)| l.writable) {
                    let desc = format!("{c:?}");
                    let r = self
                        .blocking(IoClass::Meta, move |root, _| ops::change(root, &c))
                        .await;
                    if r.is_ok() {
                        tracing::info!(target: LOG_TARGET, change = %desc, "changed");
                    }
                    r
                } else {
                    Err(OpError::PermissionDenied)
                };
                self.session.handle_result(r);
            }
            Action::Checksum {
                algorithm,
                path,
                offset,
                len,
            } => {
                let r = self
                    .blocking(IoClass::Background, move |root, _| {
                        ops::checksum(root, &path, algorithm, offset, len)
                    })
                    .await;
                self.session.handle_result(r);
            }
            Action::List {
                path,
                format,
                data,
                matching,
            } => self.start(Work::List {
                path,
                format,
                data,
                matching,
            }),
            Action::StartRetr {
                path,
                offset,
                len,
                skip,
                data,
            } => self.start(Work::Retr {
                path,
                offset,
                len,
                skip,
                data,
            }),
            Action::StartStor { path, kind, data } => {
                if self.login.as_ref().is_some_and(|(_, l, _)| l.writable) {
                    self.start(Work::Stor { path, kind, data })
                } else {
                    let _ = self
                        .events_tx
                        .send(Event::Done(Err(OpError::PermissionDenied)));
                }
            }
            Action::Abort => {
                if let Some(c) = &self.running {
                    c.cancel();
                }
            }
            Action::StartTls => self.start_tls = true,
            Action::Close => return false,
        }
        true
    }

    /// Runs a file-system job for the logged-in root on the engine's disk
    /// threads, in `class`.
    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        class: IoClass,
        f: impl FnOnce(&ServedRoot, bool) -> Result<T, OpError> + Send + 'static,
    ) -> Result<T, OpError> {
        let Some((_, login, root)) = &self.login else {
            return Err(OpError::PermissionDenied);
        };
        let (root, writable) = (Arc::clone(root), login.writable);
        self.ctx
            .engine
            .run_blocking_as(class, &Cancel::new(), move || f(&root, writable))
            .await
            .unwrap_or(Err(OpError::Local))
    }

    /// Kept connections serve the next MODE E transfer in the same
    /// direction on the same data channel; other transfers leave them for
    /// later. A download takes them only when they are exactly as many as
    /// its streams and all still open (a client that closed its end wants
    /// new ones: then they are dropped and the download connects anew).
    pub(super) fn take_kept(&mut self, work: &Work) -> Vec<TcpStream> {
        let (data, dir) = match work {
            Work::Stor { data, .. } => (data, Direction::Incoming),
            Work::Retr { data, .. } | Work::List { data, .. } if !data.protected => {
                (data, Direction::Outgoing)
            }
            _ => return Vec::new(),
        };
        let fits = |(c, _, d): &(DataChannel, Vec<TcpStream>, Direction)| {
            data.mode == TransferMode::ExtendedBlock && *c == data.channel && *d == dir
        };
        if !self.cached.as_ref().is_some_and(fits) {
            return Vec::new();
        }
        let conns = self
            .cached
            .take()
            .map(|(_, conns, _)| conns)
            .unwrap_or_default();
        if dir == Direction::Outgoing
            && (conns.len() != data.parallelism as usize || !conns.iter().all(still_open))
        {
            tracing::debug!(target: LOG_TARGET, "kept data connections dropped: closed, or another stream count");
            return Vec::new();
        }
        conns
    }

    pub(super) fn start(&mut self, work: Work) {
        let cached = match self.login {
            Some(_) => self.take_kept(&work),
            None => Vec::new(),
        };
        let Some((user, login, root)) = &self.login else {
            let _ = self
                .events_tx
                .send(Event::Done(Err(OpError::PermissionDenied)));
            return;
        };
        let cancel = Cancel::new();
        let job = Job {
            engine: self.ctx.engine.clone(),
            root: Arc::clone(root),
            store: self.ctx.store_for(root),
            // The session says when the listener is done (ClosePassive):
            // after a MODE S transfer, or when replaced.
            passive: self.passive.clone(),
            local_ip: self.local.ip(),
            peer: self.peer.ip(),
            user: user.clone(),
            anonymous: login.anonymous,
            writable: login.writable,
            cancel: cancel.clone(),
            cached,
            partials: self.cfg.partials,
            control: self.ctl.as_ref().and_then(transfer::control_watch),
            // The session's own configuration: its control connection's
            // session cache, so data connections resume that session.
            tls: self
                .cfg
                .tls
                .server
                .as_ref()
                .map(|s| Arc::clone(&s.ftp_data)),
            shutdown: self.ctx.shutdown.clone(),
            control_input: self.input_tx.subscribe(),
            cue: self.cfg.cue.ftp_spec(
                (!login.anonymous)
                    .then(|| self.cfg.users.iter().find(|u| u.name == *user))
                    .flatten(),
            ),
        };
        self.running = Some(cancel);
        // Counted live until its partial (if any) is put away, which may
        // be after the session itself is gone.
        let live = self.ctx.shutdown.guard();
        let events = self.events_tx.clone();
        tokio::spawn(
            async move {
                transfer::run(job, work, events).await;
                drop(live);
            }
            .in_current_span(),
        );
    }
}
