import Dispatch
import Foundation
import HTTPClient

/// Ctrl-C and SIGTERM: checkpoint every running download, then exit 130 or 143.
final class SignalHandling: Sendable {
    private let active: ActiveDownloads
    private let renderer: ProgressRenderer
    private let code = LockedValue<Int32?>(nil)
    /// Kept alive for the process's lifetime; written once by `install()` on the main task.
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    init(active: ActiveDownloads, renderer: ProgressRenderer) {
        self.active = active
        self.renderer = renderer
    }

    /// The exit status to use once a signal arrived.
    var exitCode: Int32? { code.withLock { $0 } }
    var isStopping: Bool { exitCode != nil }

    /// The `error:` line for the signal that stopped the run.
    var message: String? {
        guard let exitCode else { return nil }
        let name = exitCode == Exit.interrupted ? "Ctrl-C" : "SIGTERM"
        return "error: interrupted by \(name); progress was checkpointed, rerun the same command to resume"
    }

    func install() {
        for (signalNumber, status) in [(SIGINT, Exit.interrupted), (SIGTERM, Exit.terminated)] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { [self] in
                let first: Bool = code.withLock { current in
                    if current != nil { return false }
                    current = status
                    return true
                }
                guard first else {
                    // A second Ctrl-C while checkpointing: leave at once (durable bytes are safe).
                    exit(status)
                }
                Task {
                    await renderer.beginShutdown()
                    await active.pauseAll()
                }
            }
            source.resume()
            Self.sources.append(source)
        }
    }
}
