// placeholder so the bench library has a source until the first benchmark lands.
namespace moxi::bench {}
