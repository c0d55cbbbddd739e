import Foundation
import Glibc
import Testing
import TestOrigin

@testable import DownloadKit

/// The file layer's errors give their `errno` typed (``DKErrno``), as the HTTP client's do (issue #46), and
/// its system calls go through the one EINTR wrapper and report the failed call's own error number.
@Suite
struct FileLayerErrnoTests {
    @Test func fileSystemAndResumeInfoErrorsGiveTheirErrnoTyped() throws {
        let scratch = try ScratchDirectory()
        let missing = scratch.file("missing/record.dkresume")
        do {
            _ = try ResumeInfo.read(from: missing)
            Issue.record("reading a missing record succeeded")
        } catch {
            #expect(error.errorNumber == DKErrno(rawValue: ENOENT), "\(error)")
            #expect(error.detail.hasPrefix("open \(missing): "), "\(error)")
        }
        do {
            _ = try FileHandleFD.openForReading(missing)
            Issue.record("opening a missing file succeeded")
        } catch {
            #expect(error.errorNumber == DKErrno(rawValue: ENOENT), "\(error)")
            #expect(error.operation == "open")
        }
        // A directory is no file to rename over: the rename's own errno, not one left by a later call.
        try FileManager.default.createDirectory(atPath: scratch.file("dir"), withIntermediateDirectories: false)
        try Data("x".utf8).write(to: URL(fileURLWithPath: scratch.file("file")))
        do {
            try FileSystem.moveDurably(from: scratch.file("file"), to: scratch.file("dir"))
            Issue.record("renaming a file over a directory succeeded")
        } catch {
            #expect(error.errorNumber == DKErrno(rawValue: EISDIR), "\(error)")
            #expect(error.operation == "rename")
        }
    }
}
