import CDownloadKitSystem
import DownloadKit
import DownloadKitRuntime
import Foundation
import Glibc
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

/// One network link as the kernel describes it: what decides whether it carries traffic.
public struct NetworkLink: Sendable, Hashable {
    /// The link's operational state (RFC 2863, `IFLA_OPERSTATE`; `/sys/class/net/*/operstate`).
    public enum OperationalState: UInt8, Sendable, Hashable {
        case unknown = 0, notPresent = 1, down = 2, lowerLayerDown = 3, testing = 4, dormant = 5, up = 6
    }

    /// The link's name (`eth0`, `wwan0`, …).
    public var name: String
    /// Whether it is a loopback link (ARPHRD_LOOPBACK, 772): it never counts.
    public var isLoopback: Bool
    /// Its operational state.
    public var state: OperationalState
    /// Whether it has a carrier, when the kernel says.
    public var hasCarrier: Bool?

    /// A link's facts.
    public init(name: String, isLoopback: Bool = false, state: OperationalState, hasCarrier: Bool? = nil) {
        self.name = name
        self.isLoopback = isLoopback
        self.state = state
        self.hasCarrier = hasCarrier
    }

    /// Whether the link carries traffic: its state is up, or unknown with a carrier (virtual links such as
    /// tun devices report unknown). Loopback never does.
    public var isUp: Bool {
        guard !isLoopback, name != "lo" else { return false }
        switch state {
        case .up: return true
        case .unknown: return hasCarrier == true
        default: return false
        }
    }
}

extension NetworkStatus {
    /// The network's status over its links: reachable when any link is up, metered when every link that is
    /// up is metered.
    public init(links: [NetworkLink], isMetered: (String) -> Bool) {
        let up = links.filter(\.isUp).map(\.name)
        self.init(isReachable: !up.isEmpty, isMetered: !up.isEmpty && up.allSatisfy(isMetered))
    }
}

/// Watches Linux network links through the kernel's routing netlink: link and address changes wake it,
/// nothing is polled.
///
/// A link counts as up by ``NetworkLink/isUp``. A link is metered when `isMeteredInterface` says so; by default
/// names starting with `wwan`, `ppp`, `wwp` or `usb` (mobile broadband and USB tethering). The network is
/// reachable when any link is up, and metered when every link that is up is metered.
///
/// The monitor sees the network namespace of the thread that asks: ``currentStatus`` lists the links from
/// the calling thread, and ``statusUpdates()`` starts its watching thread from the calling thread (so it
/// stays in that namespace). Where the kernel's netlink cannot be opened (a sandbox that forbids it), the
/// status reads as reachable and not metered, and ``statusUpdates()`` yields it once and finishes: a monitor
/// that cannot see must not hold every download back.
public final class LinuxNetworkMonitor: NetworkMonitor {
    /// The default metered-link rule: names starting with `wwan`, `ppp`, `wwp` or `usb`.
    public static let defaultMeteredPrefixes = ["wwan", "ppp", "wwp", "usb"]

    private let isMeteredInterface: @Sendable (String) -> Bool

    /// Creates a monitor.
    /// - Parameters:
    ///   - meteredPrefixes: Link-name prefixes counted as metered when no predicate is given.
    ///   - isMeteredInterface: A predicate on the link name that overrides `meteredPrefixes`.
    public init(
        meteredPrefixes: [String] = LinuxNetworkMonitor.defaultMeteredPrefixes,
        isMeteredInterface: (@Sendable (String) -> Bool)? = nil
    ) {
        self.isMeteredInterface = isMeteredInterface ?? { name in meteredPrefixes.contains { name.hasPrefix($0) } }
    }

    /// The links of the calling thread's network namespace, or nil when netlink cannot be read.
    public static func links() -> [NetworkLink]? {
        var capacity = 16
        while true {
            var raw = [dk_link](repeating: dk_link(), count: capacity)
            let count = Int(dk_netlink_links(&raw, Int32(capacity)))
            if count < 0 { return nil }
            // More links than room (a link appeared between two dumps, or many of them): ask again.
            if count > capacity {
                capacity = count + 16
                continue
            }
            return raw.prefix(count).map(NetworkLink.init(kernel:))
        }
    }

    /// The links that are up now (loopback excluded), by name.
    public var upInterfaces: [String] {
        (Self.links() ?? []).filter(\.isUp).map(\.name).sorted()
    }

    public var currentStatus: NetworkStatus { status(of: Self.links()) }

    private func status(of links: [NetworkLink]?) -> NetworkStatus {
        guard let links else { return NetworkStatus(isReachable: true, isMetered: false) }
        return NetworkStatus(links: links, isMetered: isMeteredInterface)
    }

    /// Yields the status first, then each change, as the kernel announces link and address changes. The
    /// watching thread ends when the consumer stops iterating (the stream is terminated).
    public func statusUpdates() -> AsyncStream<NetworkStatus> {
        let (stream, continuation) = AsyncStream<NetworkStatus>.makeStream(bufferingPolicy: .bufferingNewest(8))
        // Subscribed before the first read, so that no change falls between the two.
        let subscription = dk_netlink_subscribe()
        var wake: [Int32] = [-1, -1]
        guard subscription >= 0, dk_wake_pipe(&wake) == 0 else {
            if subscription >= 0 { close(subscription) }
            continuation.yield(currentStatus)
            continuation.finish()
            return stream
        }
        let (wakeRead, wakeWrite) = (wake[0], wake[1])
        continuation.onTermination = { _ in
            // The watching thread owns every descriptor but this write end's: it closes them when it sees the
            // pipe readable (this end closed) and leaves.
            close(wakeWrite)
        }
        let started = ThreadBridge.tryStartThread { [self] in
            defer {
                close(subscription)
                close(wakeRead)
            }
            var last = status(of: Self.links())
            continuation.yield(last)
            while dk_netlink_wait(subscription, wakeRead) == 1 {
                let now = status(of: Self.links())
                if now != last {
                    continuation.yield(now)
                    last = now
                }
            }
            continuation.finish()
        }
        if !started {
            close(subscription)
            close(wakeRead)
            continuation.yield(currentStatus)
            continuation.finish()
        }
        return stream
    }
}

extension NetworkLink {
    fileprivate init(kernel link: dk_link) {
        let name = withUnsafeBytes(of: link.name) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
        self.init(
            name: name, isLoopback: link.type == 772, state: OperationalState(rawValue: link.operstate) ?? .unknown,
            hasCarrier: link.carrier < 0 ? nil : link.carrier == 1)
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
