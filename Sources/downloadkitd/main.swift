import ArgumentParser
import DownloadKitDaemon
import Foundation

/// `downloadkitd`: the background-session daemon (the same as `downloadkit daemon`).
@main
struct DownloadKitDaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "downloadkitd",
        abstract: "Background downloads that outlive the program that asked for them (see docs/DAEMON.md).")

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
