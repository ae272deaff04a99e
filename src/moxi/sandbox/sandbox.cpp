// placeholder so the sandbox library has a source until the launcher lands.
namespace moxi::sandbox {}
