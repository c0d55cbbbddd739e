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

    /// Takes the parser's copy of the arguments, masks the secrets in the process's argv memory
    /// (``ArgvMasking``), then parses that copy and runs: the secrets work, `ps` does not show them.
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        ArgvMasking.maskProcessArguments()
        await main(arguments)
    }
}
