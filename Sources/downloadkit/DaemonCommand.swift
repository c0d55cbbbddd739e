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

    @OptionGroup var options: DaemonArguments

    func run() async throws { try await options.run() }
}
