import ArgumentParser
import DownloadKit
import HTTPClient

/// The `downloadkit` command and its subcommands; `downloadkit-fleet` (Fleet/) runs the same under its own name.
public struct DownloadKitCommand: AsyncParsableCommand {
    private static let name = LockedValue("downloadkit")

    /// The command, its subcommands and the exit-status table, under the name given to ``main(named:)``.
    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: name.withLock { $0 },
            abstract: "Resumable HTTP/1.1 and HTTPS downloads that never fetch a byte twice.",
            discussion: ExitCode.table,
            version: DownloadKitVersion.string,
            subcommands: [
                GetCommand.self, ResumeInfoCommand.self, DemoCommand.self, QueueCommand.self, DaemonCommand.self,
                SessionCommand.self, RPCCommand.self,
            ]
        )
    }

    /// Made by the argument parser.
    public init() {}

    /// Takes the parser's copy of the arguments, masks the secrets in the process's argv memory
    /// (``ArgvMasking``), then parses that copy and runs under `commandName`: the secrets work, `ps` does
    /// not show them.
    public static func main(named commandName: String) async {
        name.withLock { $0 = commandName }
        let arguments = Array(CommandLine.arguments.dropFirst())
        ArgvMasking.maskProcessArguments()
        await main(arguments)
    }
}
