import ArgumentParser
import DownloadKit

@main
struct DownloadKitCLI: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "downloadkit",
        abstract: "Resumable HTTP/1.1 and HTTPS downloads that never fetch a byte twice.",
        discussion: ExitCode.table,
        version: DownloadKitVersion.string,
        subcommands: [GetCommand.self, ResumeInfoCommand.self, DemoCommand.self, QueueCommand.self, DaemonCommand.self, SessionCommand.self, RPCCommand.self]
    )
}
