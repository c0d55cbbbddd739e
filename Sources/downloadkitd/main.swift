import ArgumentParser
import DownloadKitDaemon

/// `downloadkitd`: the background-session daemon (the same as `downloadkit daemon`; docs/DAEMON.md).
@main
struct DownloadKitDaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "downloadkitd",
        abstract: "Background downloads that outlive the program that asked for them (see docs/DAEMON.md).")

    @OptionGroup var options: DaemonArguments

    func run() async throws { try await options.run() }
}
