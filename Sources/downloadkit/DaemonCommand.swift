import ArgumentParser
import DownloadKitDaemon
import Foundation

/// `downloadkit daemon`: runs `downloadkitd` in the foreground (docs/DAEMON.md).
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Run the background-session daemon in the foreground (SIGTERM checkpoints and exits 0).",
        discussion: """
            Owns one download manager per session identifier (state in DIR/<identifier>/) and serves \
            `downloadkit session` and BackgroundSession clients on a Unix socket (mode 0600; other users \
            are refused). Transfers go on after the clients exit; events missed meanwhile are kept and \
            delivered when a client of the session connects again.
            """)

    @Option(name: .customLong("state"), help: "Directory of the sessions' state (default: $XDG_STATE_HOME/downloadkit/sessions).")
    var state: String?

    @Option(name: .customLong("socket"), help: "Control socket (default: $XDG_RUNTIME_DIR/downloadkit/daemon.sock).")
    var socket: String?

    @Option(name: .customLong("max-concurrent"), help: "Transfers running at once per session (default 3).")
    var maxConcurrent: Int?

    func run() async throws {
        let status = await SessionDaemon.main(stateRoot: state, socketPath: socket, maxConcurrent: maxConcurrent)
        if status != 0 { throw ExitCode(status) }
    }
}
