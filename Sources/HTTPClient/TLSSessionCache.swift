internal import COpenSSL
import Glibc
import HTTPWire

/// The TLS sessions a client may resume, per peer: an abbreviated handshake instead of a full one for
/// every later connection to a host (segments, retries, the manager's many downloads).
///
/// Where it lives decides what may be shared: one cache belongs to one ``TLSContext``, and a context is
/// built from one ``DKTLSConfiguration`` (trust roots, verification on or off, pins, versions, ALPN,
/// cipher suites, client certificate). A session is therefore never offered under another configuration
/// or another client identity: no key comparison has to get that right. Within the cache, a session is
/// kept per ``Key``: the name the certificate was verified against, the port, and the proxy the
/// connection went through.
///
/// The rules (RFC 8446 §4.6.1 and Appendix C.4 for TLS 1.3):
/// - TLS 1.3 tickets are used once: ``take(for:)`` removes the session it returns; the server sends new
///   tickets on the resumed connection. TLS 1.2 sessions (session IDs, RFC 5077 tickets) stay and are
///   offered again.
/// - Only sessions of a handshake that passed verification (and the key pins) are stored; see
///   ``TLSSession``, which holds back the sessions OpenSSL delivers before those checks end.
/// - Bounded: at most ``sessionsPerKey`` sessions per key (the oldest dropped) and ``capacity`` keys (the
///   least recently used dropped). Expired sessions are never offered.
///
/// Thread-safe: every access is under one ``LockedValue``; sessions dropped are freed after it is released.
final class TLSSessionCache: Sendable {
    /// The peer a session belongs to.
    struct Key: Hashable, Sendable, CustomStringConvertible {
        /// The name the certificate was checked against (and sent as SNI), lower-cased; IP literals unbracketed.
        var serverName: String
        /// The origin's TCP port.
        var port: Int
        /// The proxy the connection goes through (kind, address and user), or `nil` when direct.
        var proxy: ProxyURL?

        init(serverName: String, port: Int, proxy: ProxyURL?) {
            self.serverName = IPAddressLiteral.unbracketed(serverName).lowercased()
            self.port = port
            self.proxy = proxy
        }

        var description: String { "\(serverName):\(port)" + (proxy.map { " via \($0)" } ?? "") }
    }

    /// Keys kept at most (least recently used dropped). Default 256.
    let capacity: Int
    /// Sessions kept per key at most (oldest dropped). Default 4: OpenSSL servers send two tickets per
    /// full handshake, one per resumption.
    let sessionsPerKey: Int

    private struct Entry {
        /// Oldest first.
        var sessions: [StoredTLSSession] = []
        var lastUsed: UInt64 = 0
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var clock: UInt64 = 0
        var resumptionsOffered = 0
    }

    private let state = LockedValue(State())

    init(capacity: Int = 256, sessionsPerKey: Int = 4) {
        self.capacity = max(1, capacity)
        self.sessionsPerKey = max(1, sessionsPerKey)
    }

    /// A session to offer to `key`'s peer, or `nil`. A TLS 1.3 session is removed (used once); a TLS 1.2
    /// one stays. Expired sessions met on the way are dropped.
    func take(for key: Key) -> StoredTLSSession? {
        let now = Int(time(nil))
        var dropped: [StoredTLSSession] = []
        let chosen = state.withLock { state -> StoredTLSSession? in
            guard var entry = state.entries[key] else { return nil }
            var chosen: StoredTLSSession?
            while let newest = entry.sessions.last {
                if newest.hasExpired(at: now) {
                    dropped.append(entry.sessions.removeLast())
                    continue
                }
                chosen = newest
                if newest.isSingleUse { entry.sessions.removeLast() }
                break
            }
            state.clock += 1
            entry.lastUsed = state.clock
            if chosen != nil { state.resumptionsOffered += 1 }
            state.entries[key] = entry.sessions.isEmpty ? nil : entry
            return chosen
        }
        _ = dropped
        return chosen
    }

    /// Keeps `session` for `key`, dropping the key's oldest session or the least recently used key when
    /// over the bounds. Sessions OpenSSL calls not resumable are not kept.
    func store(_ session: StoredTLSSession, for key: Key) {
        guard session.isResumable else { return }
        var dropped: [StoredTLSSession] = []
        state.withLock { state in
            var entry = state.entries[key] ?? Entry()
            if entry.sessions.contains(where: { $0.pointer == session.pointer }) { return }
            entry.sessions.append(session)
            if entry.sessions.count > sessionsPerKey {
                dropped += entry.sessions.prefix(entry.sessions.count - sessionsPerKey)
                entry.sessions.removeFirst(entry.sessions.count - sessionsPerKey)
            }
            state.clock += 1
            entry.lastUsed = state.clock
            state.entries[key] = entry
            if state.entries.count > capacity,
                let oldest = state.entries.min(by: { $0.value.lastUsed < $1.value.lastUsed })?.key
            {
                dropped += state.entries.removeValue(forKey: oldest)?.sessions ?? []
            }
        }
        // `dropped` is released here, outside the lock: SSL_SESSION_free.
        _ = dropped
    }

    /// How many sessions are kept for `key` (tests).
    func count(for key: Key) -> Int { state.withLock { $0.entries[key]?.sessions.count ?? 0 } }

    /// How many keys hold sessions (tests).
    var keyCount: Int { state.withLock { $0.entries.count } }

    /// How many times ``take(for:)`` found a session to offer.
    var resumptionsOffered: Int { state.withLock { $0.resumptionsOffered } }
}

/// One reference to an OpenSSL `SSL_SESSION`, freed with the last Swift reference.
///
/// `@unchecked Sendable`: an `SSL_SESSION` handed out by OpenSSL's new-session callback is complete, its
/// reference count is atomic, and DownloadKit never changes one; `SSL_set_session` takes its own reference.
final class StoredTLSSession: @unchecked Sendable {
    let pointer: OpaquePointer
    /// The session's protocol is TLS 1.3, whose tickets are offered once (RFC 8446 Appendix C.4).
    let isSingleUse: Bool
    /// When it stops being worth offering: its creation time plus its lifetime (the ticket's lifetime
    /// hint for TLS 1.3), seconds since the epoch.
    let expiry: Int

    /// Takes over one reference to `pointer` (the one OpenSSL's new-session callback hands over).
    init(adopting pointer: OpaquePointer) {
        self.pointer = pointer
        isSingleUse = SSL_SESSION_get_protocol_version(pointer) >= TLS1_3_VERSION
        expiry = SSL_SESSION_get_time(pointer) + SSL_SESSION_get_timeout(pointer)
    }

    deinit { SSL_SESSION_free(pointer) }

    var isResumable: Bool { SSL_SESSION_is_resumable(pointer) == 1 }

    func hasExpired(at now: Int) -> Bool { now >= expiry }
}
