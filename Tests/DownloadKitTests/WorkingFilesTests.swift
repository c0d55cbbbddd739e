import HTTPWire
import Testing
import TestThreads

@_spi(DownloadKitInternal) @testable import DownloadKit

/// The one working-file location rule (issue #12): engine, manager and CLI all ask ``WorkingFiles``.
@Suite(.offPool)
struct WorkingFilesTests {
    @Test func aFileDestinationWorksBesideIt() throws {
        let working = WorkingFiles(destination: .file("/d/x.iso"), workingDirectory: nil, url: try HTTPURL("http://h/x.iso"))
        #expect(working.partial == "/d/x.iso.dkpart")
        #expect(working.resumeInfo == "/d/x.iso.dkresume")
        #expect(working.journal == "/d/x.iso.dkjournal")
        #expect(working == WorkingFiles(besideFile: "/d/x.iso"))
    }

    @Test func aWorkingDirectoryMovesOnlyTheWorkingFiles() throws {
        let working = WorkingFiles(destination: .file("/d/x.iso"), workingDirectory: "/w", url: try HTTPURL("http://h/x.iso"))
        #expect(working.partial == "/w/x.iso.dkpart")
        #expect(working.directory == "/w")
    }

    @Test func aDirectoryDestinationNamesThemAfterTheURLWithoutItsPassword() throws {
        let plain = WorkingFiles(destination: .directory("/d", naming: .fromResponse), workingDirectory: nil, url: try HTTPURL("http://h/f?id=1"))
        let withUser = WorkingFiles(
            destination: .directory("/d", naming: .fromResponse), workingDirectory: nil, url: try HTTPURL("http://u:secret@h/f?id=1"))
        #expect(plain == withUser)
        #expect(plain.partial.hasPrefix("/d/dk-"))
        #expect(plain.partial.hasSuffix(".dkpart"))
        #expect(!plain.partial.contains("secret"))
    }
}
