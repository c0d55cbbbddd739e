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

    /// The restore's one-readdir check (FileSystem.containsName): a name ending in the suffix, a name that
    /// is the suffix, none, and a missing directory (nothing in it).
    @Test func aDirectoryIsAskedOnceWhetherItHoldsAName() throws {
        let dir = try ScratchDirectory()
        try Data().write(to: URL(fileURLWithPath: dir.file("a.txt")))
        #expect(!FileSystem.containsName(endingWith: ".dkpart", in: dir.path))
        try Data().write(to: URL(fileURLWithPath: dir.file("x.dkpart.old")))
        #expect(!FileSystem.containsName(endingWith: ".dkpart", in: dir.path))
        try Data().write(to: URL(fileURLWithPath: dir.file(".dkpart")))
        #expect(FileSystem.containsName(endingWith: ".dkpart", in: dir.path))
        try FileManager.default.removeItem(atPath: dir.file(".dkpart"))
        try Data().write(to: URL(fileURLWithPath: dir.file("dk-0123.dkpart")))
        #expect(FileSystem.containsName(endingWith: ".dkpart", in: dir.path))
        #expect(!FileSystem.containsName(endingWith: ".dkpart", in: dir.file("missing")))
    }
}
