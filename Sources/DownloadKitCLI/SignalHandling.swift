import Dispatch
import Foundation
import HTTPClient

/// Ctrl-C and SIGTERM for `get` and `queue run` (one handler): the first signal records the exit
/// status (130 or 143) and starts the command's shutdown — every running transfer stops with its bytes
/// checkpointed —; a second signal exits at once (durable bytes are safe on disk either way).
public final class SignalHandling: Sendable {
    private let rerunHint: String
    private let shutdown: @Sendable () async -> Void
    private let state = LockedValue<(code: Int32?, closing: Task<Void, Never>?)>((nil, nil))
    /// Kept alive for the process's lifetime; written once by `install()` on the main task.
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    /// - Parameters:
    ///   - rerunHint: What the user runs to resume, for the `error:` line (e.g. "rerun the same command").
    ///   - shutdown: Stops the command's transfers with their progress checkpointed.
    public init(rerunHint: String, shutdown: @escaping @Sendable () async -> Void) {
        self.rerunHint = rerunHint
        self.shutdown = shutdown
    }

    /// The exit status to use once a signal arrived.
    public var exitCode: Int32? { state.withLock { $0.code } }
    var isStopping: Bool { exitCode != nil }

    /// The `error:` line for the signal that stopped the run.
    public var message: String? {
        guard let exitCode else { return nil }
        let name = exitCode == Exit.interrupted ? "Ctrl-C" : "SIGTERM"
        return "error: interrupted by \(name); progress was checkpointed, \(rerunHint) to resume"
    }

    /// Installs the SIGINT and SIGTERM handlers (once).
    public func install() {
        for (signalNumber, status) in [(SIGINT, Exit.interrupted), (SIGTERM, Exit.terminated)] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { [self] in
                let first: Bool = state.withLock { current in
                    if current.code != nil { return false }
                    current.code = status
                    current.closing = Task { [shutdown] in await shutdown() }
                    return true
                }
                if !first { exit(status) }
            }
            source.resume()
            Self.sources.append(source)
        }
    }

    /// Waits until the shutdown a signal started has finished (returns at once without a signal).
    public func stopped() async {
        let closing = state.withLock { $0.closing }
        await closing?.value
    }
}
