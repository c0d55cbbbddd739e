import DownloadKit
import Foundation
import HTTPClient

/// What the network allows right now.
public struct NetworkStatus: Sendable, Hashable, CustomStringConvertible {
    /// Whether any network link is up.
    public var isReachable: Bool
    /// Whether every link that is up is metered (cellular, tethering): iOS's "cellular" case.
    public var isMetered: Bool

    public init(isReachable: Bool, isMetered: Bool) {
        self.isReachable = isReachable
        self.isMetered = isMetered
    }

    public var description: String {
        isReachable ? (isMetered ? "reachable (metered)" : "reachable") : "unreachable"
    }
}

/// A source of network status changes for a ``DownloadManager`` (the Linux counterpart of watching
/// reachability on iOS).
public protocol NetworkMonitor: Sendable {
    /// The status now.
    var currentStatus: NetworkStatus { get }
    /// Status changes (a new stream per call; it may start with the current status).
    func statusUpdates() -> AsyncStream<NetworkStatus>
}

/// Watches Linux network links by polling `/sys/class/net/*/operstate` and `carrier`.
///
/// A link counts as up when its `operstate` is `up`, or `unknown` with `carrier` 1 (virtual links such
/// as tun devices report `unknown`). Loopback (`lo`, or any link whose `type` is 772) never counts. A link
/// is metered when ``isMeteredInterface`` says so; by default names starting with `wwan`, `ppp`, `wwp`
/// or `usb` (mobile broadband and USB tethering). The network is reachable when any link is up, and
/// metered when every link that is up is metered.
public final class LinuxNetworkMonitor: NetworkMonitor {
    /// The default metered-link rule: names starting with `wwan`, `ppp`, `wwp` or `usb`.
    public static let defaultMeteredPrefixes = ["wwan", "ppp", "wwp", "usb"]

    private let root: String
    private let interval: Double
    private let isMeteredInterface: @Sendable (String) -> Bool

    /// Creates a monitor.
    /// - Parameters:
    ///   - sysfsNetPath: The directory listing the links; `/sys/class/net` (tests pass a fake tree).
    ///   - pollInterval: Seconds between polls. Default 1.
    ///   - meteredPrefixes: Link-name prefixes counted as metered when no predicate is given.
    ///   - isMeteredInterface: A predicate on the link name that overrides `meteredPrefixes`.
    public init(
        sysfsNetPath: String = "/sys/class/net", pollInterval: Double = 1,
        meteredPrefixes: [String] = LinuxNetworkMonitor.defaultMeteredPrefixes,
        isMeteredInterface: (@Sendable (String) -> Bool)? = nil
    ) {
        self.root = sysfsNetPath
        self.interval = max(0.01, pollInterval)
        self.isMeteredInterface = isMeteredInterface ?? { name in meteredPrefixes.contains { name.hasPrefix($0) } }
    }

    /// The links that are up now (loopback excluded), by name.
    public var upInterfaces: [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return names.sorted().filter { name in
            guard name != "lo", read(name, "type") != "772" else { return false }
            switch read(name, "operstate") {
            case "up": return true
            case "unknown": return read(name, "carrier") == "1"
            default: return false
            }
        }
    }

    public var currentStatus: NetworkStatus {
        let up = upInterfaces
        return NetworkStatus(isReachable: !up.isEmpty, isMetered: !up.isEmpty && up.allSatisfy(isMeteredInterface))
    }

    /// Polls every `pollInterval` and yields the status first, then each change. The polling stops when
    /// the consumer stops iterating (the stream is terminated).
    public func statusUpdates() -> AsyncStream<NetworkStatus> {
        let (stream, continuation) = AsyncStream<NetworkStatus>.makeStream(bufferingPolicy: .bufferingNewest(8))
        let interval = self.interval
        let poller = Task { [self] in
            var last: NetworkStatus?
            while !Task.isCancelled {
                let status = currentStatus
                if status != last {
                    continuation.yield(status)
                    last = status
                }
                try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in poller.cancel() }
        return stream
    }

    private func read(_ interface: String, _ attribute: String) -> String? {
        // Reading `carrier` of a link that is administratively down fails with EINVAL: that reads as nil.
        guard let data = FileManager.default.contents(atPath: root + "/" + interface + "/" + attribute) else {
            return nil
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// A network monitor driven by hand (tests, or an application that learns the network state elsewhere).
public final class ManualNetworkMonitor: NetworkMonitor {
    private struct State {
        var status: NetworkStatus
        var subscribers: [Int: AsyncStream<NetworkStatus>.Continuation] = [:]
        var nextID = 0
    }

    private let state: LockedValue<State>

    public init(_ status: NetworkStatus = NetworkStatus(isReachable: true, isMetered: false)) {
        state = LockedValue(State(status: status))
    }

    public var currentStatus: NetworkStatus { state.withLock { $0.status } }

    /// Reports a new status to every subscriber.
    public func update(_ status: NetworkStatus) {
        let subscribers = state.withLock { state in
            state.status = status
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.yield(status) }
    }

    public func statusUpdates() -> AsyncStream<NetworkStatus> {
        let (stream, continuation) = AsyncStream<NetworkStatus>.makeStream(bufferingPolicy: .bufferingNewest(8))
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            continuation.yield(state.status)
            return id
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }
}
