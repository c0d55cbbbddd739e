import Glibc

extension AddressFamily {
    /// The addresses of the allowed families (all for `.any`), in their order.
    func allowed(_ addresses: [SocketAddress]) -> [SocketAddress] {
        switch self {
        case .any: addresses
        case .ipv4: addresses.filter { $0.family == AF_INET }
        case .ipv6: addresses.filter { $0.family == AF_INET6 }
        }
    }
}

/// How one address fared while a connection was being established.
public struct ConnectAttempt: Sendable, Hashable, CustomStringConvertible {
    /// What happened to the attempt.
    public enum Outcome: String, Sendable, Hashable {
        /// Never started: an earlier attempt won first.
        case notStarted
        /// This attempt won.
        case connected
        /// The connect failed (refused, unreachable, …).
        case failed
        /// Still pending when another attempt won (or the deadline passed); its socket was closed.
        case abandoned
    }

    /// The address and port, for example "127.0.0.1:80" or "[::1]:80".
    public var address: String
    /// `.ipv4` or `.ipv6`.
    public var family: AddressFamily
    /// The outcome.
    public var outcome: Outcome

    public var description: String { "\(address) \(outcome.rawValue)" }
}

/// Runs ``HappyEyeballs`` decisions with real sockets: non-blocking `connect(2)`s watched together
/// with one `poll(2)`, the timer being poll's timeout.
enum HappyEyeballsConnector {
    /// Connects to the first of `addresses` (already in attempt order) that accepts, racing them
    /// per RFC 8305. Losers are closed.
    /// - Returns: The connected socket, its address and what happened to every address.
    static func connect(
        to addresses: [SocketAddress], host: String, deadline: Deadline, delay: UInt64
    ) throws(TransportError) -> (fd: Int32, address: SocketAddress, attempts: [ConnectAttempt]) {
        var race = HappyEyeballs(count: addresses.count, delay: delay)
        var attempts = addresses.map {
            ConnectAttempt(address: $0.description, family: $0.family == AF_INET6 ? .ipv6 : .ipv4, outcome: .notStarted)
        }
        var sockets: [Int: Int32] = [:]
        var failures: [(Int, TransportError)] = []
        var timedOut = false
        defer {
            for (_, fd) in sockets { _ = Glibc.close(fd) }
        }
        var actions = race.start(now: Deadline.now().uptimeNanoseconds)
        while true {
            while !actions.isEmpty {
                let action = actions.removeFirst()
                switch action {
                case .startAttempt(let index):
                    do throws(TransportError) {
                        let fd = try Socket.makeStreamSocket(family: addresses[index].family)
                        if let error = Socket.startConnect(fd, to: addresses[index]) {
                            _ = Glibc.close(fd)
                            throw TransportError(
                                .connectFailed, errorNumber: error, operation: "connect", detail: error.description)
                        }
                        sockets[index] = fd
                        attempts[index].outcome = .abandoned  // until it connects or fails
                    } catch {
                        attempts[index].outcome = .failed
                        failures.append((index, error))
                        actions += race.attemptFailed(index, now: Deadline.now().uptimeNanoseconds)
                    }
                case .cancelAttempt(let index):
                    if let fd = sockets.removeValue(forKey: index) { _ = Glibc.close(fd) }
                    attempts[index].outcome = .abandoned
                case .succeed(let index):
                    guard let fd = sockets.removeValue(forKey: index) else { continue }
                    attempts[index].outcome = .connected
                    return (fd, addresses[index], attempts)
                case .fail:
                    throw failure(host: host, addresses: addresses, failures: failures, timedOut: timedOut)
                }
            }
            if deadline.hasPassed {
                timedOut = true
                actions = race.timedOut()
                continue
            }
            let pendingIndices = race.pending
            var entries = pendingIndices.map { pollfd(fd: sockets[$0] ?? -1, events: Int16(POLLOUT), revents: 0) }
            var wake = deadline
            if let next = race.nextAttemptAt { wake = min(wake, Deadline(uptimeNanoseconds: next)) }
            let count = Glibc.poll(&entries, nfds_t(entries.count), wake.remainingMilliseconds)
            if count < 0 {
                let error = DKErrno.current
                if error == .interrupted { continue }
                throw TransportError(
                    .systemCall, errorNumber: error, operation: "poll", detail: "waiting for connect failed: \(error)")
            }
            let now = Deadline.now().uptimeNanoseconds
            if count == 0 {
                actions = race.timerFired(now: now)
                continue
            }
            // One event at a time: a win ends the race and cancels the rest.
            for (position, entry) in entries.enumerated() where entry.revents != 0 {
                let index = pendingIndices[position]
                guard let fd = sockets[index] else { continue }
                if let error = Socket.pendingError(fd) {
                    _ = Glibc.close(fd)
                    sockets[index] = nil
                    attempts[index].outcome = .failed
                    failures.append(
                        (index, TransportError(.connectFailed, errorNumber: error, operation: "connect", detail: error.description)))
                    actions = race.attemptFailed(index, now: now)
                } else {
                    actions = race.attemptConnected(index, now: now)
                }
                break
            }
        }
    }

    private static func failure(
        host: String, addresses: [SocketAddress], failures: [(Int, TransportError)], timedOut: Bool
    ) -> TransportError {
        var error =
            timedOut || failures.isEmpty
            ? TransportError(.connectTimeout, operation: "connect", detail: "")
            : failures[failures.count - 1].1
        var parts = failures.map { "\(addresses[$0.0]): \($0.1.detail)" }
        if timedOut { parts.append("timed out") }
        error.detail = "could not connect to \(host) (\(parts.joined(separator: "; ")))"
        return error
    }
}
