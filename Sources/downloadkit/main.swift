import ArgumentParser
import DownloadKit

struct DownloadKitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "downloadkit",
        abstract: "Resumable HTTP/HTTPS downloads.",
        version: DownloadKitVersion.string
    )
}

DownloadKitCommand.main()
