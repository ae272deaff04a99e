import os
ORIG = ['IMG_0001.JPG', 'IMG_0002.JPG', 'Holiday Pic.PNG', 'Beach Sunset 2023.jpeg', 'Notes ABOUT trip.TXT', 'already_fine.png', 'Family Dinner (1).JPG']

def target(n):
    return n.lower().replace(' ', '_')

def test_names():
    assert sorted(os.listdir('/app/photos')) == sorted(target(n) for n in ORIG)

def test_contents_preserved():
    for n in ORIG:
        p = os.path.join('/app/photos', target(n))
        assert os.path.isfile(p)
        assert open(p).read() == 'photo-data:%s\n' % n
