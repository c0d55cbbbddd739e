import DownloadKit

print("downloadkit-bench \(DownloadKitVersion.string)")
