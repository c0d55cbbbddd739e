import DownloadKit
import Foundation
import Testing
import TestOrigin

/// A file destination must name a file: "", "/", "dir/", "." and ".." are refused before anything is
/// created (before, "" put `.dkpart` and `.dkresume` in the working directory).
@Suite struct DestinationPathTests {
    @Test(arguments: ["", "/", "somewhere/", ".", "..", "a/.."])
    func aFileDestinationThatNamesNoFileIsRefused(path: String) async throws {
        let (result, _) = await runDownload(DownloadRequest(url: "http://127.0.0.1:1/x.bin", destination: .file(path)))
        guard case .failure(let error) = result else {
            Issue.record("a download to \"\(path)\" did not fail")
            return
        }
        #expect(error.code == .fileSystem)
        #expect(error.detail.contains("names no file"), "\(error.detail)")
        let cwd = FileManager.default.currentDirectoryPath
        #expect(!FileManager.default.fileExists(atPath: cwd + "/.dkpart"))
        #expect(!FileManager.default.fileExists(atPath: cwd + "/.dkresume"))
    }
}
