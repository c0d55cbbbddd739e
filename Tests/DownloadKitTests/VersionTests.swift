import Testing
@testable import DownloadKit

@Suite struct VersionTests {
    @Test func versionIsSemantic() {
        #expect(DownloadKitVersion.string.split(separator: ".").count == 3)
    }
}
