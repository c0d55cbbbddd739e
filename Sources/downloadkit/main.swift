import DownloadKitCLI

// `downloadkit`: the commands live in DownloadKitCLI, shared with Fleet/'s `downloadkit-fleet`.
await DownloadKitCommand.main(named: "downloadkit")
